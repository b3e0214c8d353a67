#include "health_check.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>

#include "communicator.h"
#include "loom/error.h"

namespace loom {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : v[n / 2 - 1] + (v[n / 2] - v[n / 2 - 1]) / 2;
}

// Median seconds of `reps` timed calls of f after one untimed warm-up.
template <typename F>
double time_median(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median_of(std::move(t));
}

}  // namespace

RankTimeStats rank_time_stats(const std::vector<double>& per_rank, double outlier_ratio) {
  LOOM_CHECK(!per_rank.empty(), "rank_time_stats: no ranks");
  RankTimeStats s;
  s.per_rank = per_rank;
  s.min = *std::min_element(per_rank.begin(), per_rank.end());
  const auto max_it = std::max_element(per_rank.begin(), per_rank.end());  // first of equal maxima
  s.max = *max_it;
  s.slowest_rank = static_cast<int>(max_it - per_rank.begin());
  s.median = median_of(per_rank);
  for (size_t r = 0; r < per_rank.size(); ++r)
    if (per_rank[r] > outlier_ratio * s.median) s.outliers.push_back(static_cast<int>(r));
  return s;
}

std::string describe(const RankTimeStats& s, const std::string& what, double outlier_ratio) {
  std::ostringstream os;
  os << std::setprecision(4);
  if (s.per_rank.size() == 1) {  // one process: its time, no spread to report
    os << what << " " << s.max << " s";
    return os.str();
  }
  os << what << " min " << s.min << " / median " << s.median << " / max " << s.max << " s over "
     << s.per_rank.size() << " ranks, slowest rank " << s.slowest_rank;
  if (!s.outliers.empty()) {
    os << "; outliers (> " << outlier_ratio << "x median):";
    for (int r : s.outliers) os << " rank " << r << " (" << s.per_rank[static_cast<size_t>(r)] << " s)";
  }
  return os.str();
}

std::vector<double> gather_rank_times(Communicator* comm, double my_seconds) {
  if (!comm || comm->world() == 1) return {my_seconds};
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(comm->device());
  torch::Tensor mine = torch::full({1}, my_seconds, opts);
  torch::Tensor all = torch::empty({comm->world()}, opts);
  comm->all_gather(all, mine);
  torch::Tensor host = all.to(torch::kCPU);
  const double* p = host.data_ptr<double>();
  return std::vector<double>(p, p + comm->world());
}

RankTimeStats step_time_report(Communicator* comm, double my_seconds, double outlier_ratio) {
  return rank_time_stats(gather_rank_times(comm, my_seconds), outlier_ratio);
}

ProbeResult startup_probe(Communicator* comm, const torch::Device& device, const ProbeOptions& o) {
  LOOM_CHECK(o.matmul_n > 0 && o.reps > 0 && o.allreduce_numel > 0, "startup_probe: bad options");
  torch::NoGradGuard no_grad;
  ProbeResult r;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  // Fixed inputs: every rank multiplies the same matrices (values in [0, 1), no overflow).
  torch::Tensor a = torch::arange(o.matmul_n * o.matmul_n, f32).remainder(97).div(97).reshape({o.matmul_n, o.matmul_n});
  torch::Tensor b = a.t().contiguous();
  const double mm_s = time_median(o.reps, [&] { (void)torch::mm(a, b).sum().item<float>(); });
  r.matmul = rank_time_stats(gather_rank_times(comm, mm_s), o.outlier_ratio);
  r.matmul_tflops = 2.0 * static_cast<double>(o.matmul_n) * o.matmul_n * o.matmul_n / mm_s / 1e12;
  if (comm && comm->world() > 1) {
    torch::Tensor x = torch::ones({o.allreduce_numel}, f32.device(comm->device()));
    const double ar_s = time_median(o.reps, [&] {
      comm->all_reduce(x);
      (void)x[0].item<float>();
      x.fill_(1);
    });
    r.allreduce = rank_time_stats(gather_rank_times(comm, ar_s), o.outlier_ratio);
  }
  return r;
}

}  // namespace loom
