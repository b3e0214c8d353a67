// The bias gradient in the weight gradient's GEMM: cuda::linear_grad_bf16 (cuBLASLt's BGRADB
// epilogue) and biased_linear (fused_ops.h), its autograd wrapper, against float64 references
// computed on the GPU; the cases the GEMM declines, which fall back; a 1b-shaped model's gradients
// with and without the epilogue; and a timing print of the old and new weight-gradient step.
// Label gpu; Catch2 tag [bias_grad_epilogue].
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <ATen/cuda/CUDAContext.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "fused_ops.h"
#include "gpu_util.h"
#include "model.h"

namespace {

using loom::test::cuda;
using loom::test::rel_err;
using loom::cuda::LinearGradStatus;

// Errors relative to the reference's largest magnitude (rel_err). bf16 keeps 8 significant bits:
// one rounding moves a value by at most half a unit in its last place, 2^-8 of the largest
// magnitude (0.0039) where the values near the largest round worst; the epilogue's outputs are
// rounded once from fp32 sums, so 5e-3. dx (and the fallback's dw) come from at::mm, whose split-K
// may add partial sums rounded to bf16 (PyTorch's default reduced-precision reduction): 2e-2,
// the tolerance gpu_model_test gives bf16 gradients.
constexpr double kOneRounding = 5e-3;
constexpr double kMm = 2e-2;

struct Shape {
  int64_t N, in, out;
};
// The 1b model's projections, wqkv [6144, 2048] and wo [2048, 2048], over 4096 tokens and over its
// step's micro-batch of 4 x 4096; an odd token count; an MLP-wide output (5632) and input.
const std::vector<Shape> kShapes = {{4096, 2048, 6144}, {16384, 2048, 6144}, {4096, 2048, 2048},
                                    {16384, 2048, 2048}, {4099, 2048, 6144}, {4099, 2048, 5632},
                                    {4096, 5632, 2048}};

torch::TensorOptions bf16() { return torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16); }

// Calls the launcher on dy [N, out] and x [N, in] into fresh dw, db.
struct Launch {
  loom::cuda::LinearGradResult result;
  torch::Tensor dw, db;
};
Launch launch(const torch::Tensor& dy, const torch::Tensor& x) {
  const int64_t N = dy.size(0), out = dy.size(1), in = x.size(1);
  Launch l{{}, torch::empty({out, in}, dy.options()), torch::empty({out}, dy.options())};
  const size_t bytes = loom::cuda::kLinearGradWorkspaceBytes;
  const torch::Tensor ws = torch::empty({static_cast<int64_t>(bytes)}, dy.options().dtype(torch::kUInt8));
  l.result = loom::cuda::linear_grad_bf16(dy.data_ptr(), x.data_ptr(), N, in, out, l.dw.data_ptr(), l.db.data_ptr(),
                                          ws.data_ptr(), bytes, at::cuda::getCurrentCUDAStream().stream());
  return l;
}

// Small integers in [-2, 2] as bf16: every product and every sum over up to 16384 rows is an
// integer below 2^24, exact in fp32 and float64 alike, so the only rounding is the final one.
torch::Tensor small_integers(int64_t rows, int64_t cols) {
  return torch::randint(-2, 3, {rows, cols}, torch::TensorOptions().device(cuda()).dtype(torch::kFloat32))
      .to(torch::kBFloat16);
}

// {dx, dw, db} of sum(biased_linear(x, w, b) * dy), x given as [1, N, in] (a view of x's own
// memory, misaligned where x is).
std::vector<torch::Tensor> linear_grads(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                                        const torch::Tensor& dy) {
  const torch::Tensor xg = x.detach().view({1, x.size(0), x.size(1)}).requires_grad_(true);
  const torch::Tensor wg = w.detach().clone().requires_grad_(true), bg = b.detach().clone().requires_grad_(true);
  const torch::Tensor y = loom::biased_linear(xg, wg, bg);
  {
    torch::NoGradGuard no_grad;
    CHECK(torch::equal(y.squeeze(0), torch::addmm(b, x, w.t())));  // the forward is addmm's, bit for bit
  }
  y.backward(dy.unsqueeze(0));
  return {xg.grad().squeeze(0), wg.grad(), bg.grad()};
}

// The float64 references of linear_grads.
std::vector<torch::Tensor> reference_grads(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy) {
  const torch::Tensor x64 = x.to(torch::kFloat64), w64 = w.to(torch::kFloat64), dy64 = dy.to(torch::kFloat64);
  return {dy64.mm(w64), dy64.t().mm(x64), dy64.sum(0)};
}

// Restores the epilogue switch on leaving a scope.
class EpilogueSetting {
 public:
  explicit EpilogueSetting(bool enabled) : previous_(loom::set_bias_grad_epilogue(enabled)) {}
  ~EpilogueSetting() { loom::set_bias_grad_epilogue(previous_); }
  EpilogueSetting(const EpilogueSetting&) = delete;
  EpilogueSetting& operator=(const EpilogueSetting&) = delete;

 private:
  bool previous_;
};

}  // namespace

TEST_CASE("the bias-gradient GEMM writes dy^T x and dy's row sums, rounded once to bf16", "[bias_grad_epilogue]") {
  for (const Shape& s : kShapes) {
    INFO("N " << s.N << " in " << s.in << " out " << s.out);
    torch::manual_seed(81);
    {
      // Exact sums: the result must be the float64 reference rounded to bf16, bit for bit.
      const torch::Tensor dy = small_integers(s.N, s.out), x = small_integers(s.N, s.in);
      const Launch l = launch(dy, x);
      REQUIRE(l.result.status == LinearGradStatus::kDone);
      const torch::Tensor dy64 = dy.to(torch::kFloat64);
      CHECK(torch::equal(l.dw, dy64.t().mm(x.to(torch::kFloat64)).to(torch::kBFloat16)));
      CHECK(torch::equal(l.db, dy64.sum(0).to(torch::kBFloat16)));
    }
    {
      // Normal values, as gradients and activations have.
      const torch::Tensor dy = torch::randn({s.N, s.out}, bf16()), x = torch::randn({s.N, s.in}, bf16());
      const Launch l = launch(dy, x);
      REQUIRE(l.result.status == LinearGradStatus::kDone);
      const torch::Tensor dy64 = dy.to(torch::kFloat64);
      CHECK(rel_err(l.dw, dy64.t().mm(x.to(torch::kFloat64))) < kOneRounding);
      CHECK(rel_err(l.db, dy64.sum(0)) < kOneRounding);
    }
  }
}

TEST_CASE("biased_linear's backward takes the epilogue in bf16 and equals float64 references", "[bias_grad_epilogue]") {
  const EpilogueSetting on(true);
  for (const Shape& s : {kShapes[0], kShapes[3], kShapes[4], kShapes[5]}) {
    INFO("N " << s.N << " in " << s.in << " out " << s.out);
    torch::manual_seed(82);
    const torch::Tensor x = torch::randn({s.N, s.in}, bf16()), dy = torch::randn({s.N, s.out}, bf16());
    const torch::Tensor w = torch::randn({s.out, s.in}, bf16()) * 0.02, b = torch::randn({s.out}, bf16());
    const int64_t before = loom::bias_grad_epilogue_count();
    const std::vector<torch::Tensor> got = linear_grads(x, w, b, dy);
    CHECK(loom::bias_grad_epilogue_count() == before + 1);
    const std::vector<torch::Tensor> want = reference_grads(x, w, dy);
    CHECK(rel_err(got[0], want[0]) < kMm);
    CHECK(rel_err(got[1], want[1]) < kOneRounding);
    CHECK(rel_err(got[2], want[2]) < kOneRounding);
    // The same GEMM as the launcher's own call: the same bits.
    const Launch l = launch(dy, x);
    CHECK(torch::equal(got[1], l.dw));
    CHECK(torch::equal(got[2], l.db));
  }
}

TEST_CASE("the cases the bias-gradient GEMM declines fall back to a GEMM and a reduction", "[bias_grad_epilogue]") {
  const EpilogueSetting on(true);
  torch::manual_seed(83);
  const int64_t N = 1000, in = 256;
  // An output width that is not a multiple of 8 (rows of 100 bf16 are 200 bytes).
  const torch::Tensor x = torch::randn({N, in}, bf16());
  const torch::Tensor dy100 = torch::randn({N, 100}, bf16());
  CHECK(launch(dy100, x).result.status == LinearGradStatus::kUnsupported);
  // x 2 bytes past a 16-byte boundary: contiguous, but not aligned for the tensor-core kernels.
  const torch::Tensor x_off = torch::randn({N * in + 1}, bf16()).narrow(0, 1, N * in).view({N, in});
  const torch::Tensor dy = torch::randn({N, 128}, bf16());
  CHECK(launch(dy, x_off).result.status == LinearGradStatus::kUnsupported);

  const int64_t before = loom::bias_grad_epilogue_count();
  const auto check_fallback = [&](const torch::Tensor& xs, const torch::Tensor& dys) {
    const torch::Tensor w = torch::randn({dys.size(1), in}, xs.options()) * 0.05;
    const torch::Tensor b = torch::randn({dys.size(1)}, xs.options());
    const std::vector<torch::Tensor> got = linear_grads(xs, w, b, dys);
    const std::vector<torch::Tensor> want = reference_grads(xs, w, dys);
    const double tol = xs.scalar_type() == torch::kBFloat16 ? kMm : 1e-5;
    for (size_t i = 0; i < 3; ++i) CHECK(rel_err(got[i], want[i]) < tol);
  };
  SECTION("out 100") { check_fallback(x, dy100); }
  SECTION("misaligned x") { check_fallback(x_off, dy); }
  SECTION("fp32 (plain addmm)") {
    const loom::test::ExactFp32Matmuls exact;
    check_fallback(x.to(torch::kFloat32), dy.to(torch::kFloat32));
  }
  SECTION("epilogue switched off") {
    const EpilogueSetting off(false);
    check_fallback(x, dy);
  }
  CHECK(loom::bias_grad_epilogue_count() == before);
}

TEST_CASE("a 1b-shaped model's gradients with the bias-gradient epilogue equal those without", "[bias_grad_epilogue]") {
  loom::ModelOptions o;  // the 1b's layer: C 2048, 16 heads of 128, biased wqkv and wo; one layer
  o.hidden_size = 2048;
  o.num_layers = 1;
  o.num_attention_heads = 16;
  o.vocab_size = 512;
  o.dtype = torch::kBFloat16;
  REQUIRE((o.qkv_bias && o.out_bias));
  torch::manual_seed(84);
  loom::InternLM m(o);
  m->to(cuda());
  const loom::Batch b = loom::test::make_packed_batch({{300, 212}, {512}}, 512, o.vocab_size, 85).to(cuda());
  auto run = [&](bool epilogue) {
    const EpilogueSetting setting(epilogue);
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
    const int64_t before = loom::bias_grad_epilogue_count();
    const torch::Tensor h = m->hidden_states(b);
    // A loss that weighs every position and channel differently.
    (h.to(torch::kFloat32) * torch::linspace(-1, 1, h.numel(), h.options().dtype(torch::kFloat32)).view(h.sizes()))
        .sum()
        .backward();
    CHECK(loom::bias_grad_epilogue_count() - before == (epilogue ? 2 * o.num_layers : 0));  // wqkv and wo
    std::map<std::string, torch::Tensor> g;
    for (const auto& p : m->named_parameters())
      if (p.value().grad().defined()) g[p.key()] = p.value().grad().clone();
    return g;
  };
  const auto with = run(true), without = run(false);
  REQUIRE(with.size() == without.size());
  for (const auto& [name, g] : without) {
    INFO(name);
    // Only the biased projections' weight and bias gradients are computed differently (one
    // rounding of an fp32 sum each way).
    CHECK(rel_err(with.at(name), g) < kMm);
  }
}

TEST_CASE("timing: the 1b's qkv and wo weight gradients with and without the epilogue", "[bias_grad_epilogue]") {
  const auto median_ms = [](const auto& f) {
    for (int i = 0; i < 3; ++i) f();
    std::vector<double> ms;
    for (int i = 0; i < 20; ++i) {
      torch::cuda::synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      f();
      torch::cuda::synchronize();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  for (const Shape& s : {kShapes[1], kShapes[3]}) {
    torch::manual_seed(86);
    const torch::Tensor dy = torch::randn({s.N, s.out}, bf16()), x = torch::randn({s.N, s.in}, bf16());
    const double old_ms = median_ms([&] {
      const torch::Tensor dw = dy.t().mm(x), db = dy.sum(0);
    });
    const double new_ms = median_ms([&] { REQUIRE(launch(dy, x).result.status == LinearGradStatus::kDone); });
    WARN("dw, db of [" << s.out << ", " << s.in << "] over " << s.N << " tokens, median of 20 (host-timed, "
                       << "synchronized): mm + sum " << old_ms << " ms, cuBLASLt with the bias-gradient epilogue "
                       << new_ms << " ms");
  }
}
