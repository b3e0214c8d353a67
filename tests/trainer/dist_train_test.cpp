// Several processes on loopback (Gloo): data-parallel and ZeRO-1 training give the losses and weights
// of one process with the same global batch; a checkpoint saved at W=2 resumes at W=1 and W=3; the
// ranks' samples are disjoint and cover the global batch; a dead, throwing or stalled rank takes the
// job down within the collective timeout, every survivor reporting rank, host, step and collective.
// The ranks are tests/trainer/dist_worker.cpp (a tiny LM on exactly predictable data).
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "loom/sys.h"
#include "dist_harness.h"
#include "safetensors.h"
#include "test_util.h"

namespace {

using loom::test::quote;
using loom::test::read_all;
using loom::test::TempDir;

using loom::test::RankResult;
using loom::test::require_success;

// The workers of one job; a worker stuck past 120 s is killed.
std::vector<RankResult> launch(int world, const std::string& args, const TempDir& dir, const std::string& tag) {
  return loom::test::launch_ranks(world, LOOM_DIST_WORKER_BIN, [&](int) { return args; }, dir, tag, 120);
}

std::map<int64_t, double> read_losses(const std::string& path) {
  std::map<int64_t, double> m;
  std::istringstream is(read_all(path));
  int64_t step;
  double loss;
  while (is >> step >> loss) m[step] = loss;
  return m;
}

std::map<std::string, torch::Tensor> read_weights(const std::string& path) {
  loom::safetensors::Reader r(path);
  std::map<std::string, torch::Tensor> m;
  for (const std::string& n : r.names()) m[n] = r.get(n);
  return m;
}

// Float32 sums in another order (W ranks, other buckets) differ by a few ulps per step; four AdamW
// steps of lr 0.02 move each weight by at most 0.08, so 2e-5 absolute is ~100 float32 ulps of that.
constexpr double kWeightTol = 2e-5;
constexpr double kLossRelTol = 1e-5;

void check_same_losses(const std::map<int64_t, double>& ref, const std::map<int64_t, double>& got) {
  REQUIRE(!got.empty());
  for (const auto& [step, loss] : got) {
    INFO("step " << step);
    REQUIRE(ref.count(step) == 1);
    CHECK(loss == Approx(ref.at(step)).epsilon(kLossRelTol));
  }
}

void check_same_weights(const std::map<std::string, torch::Tensor>& ref, const std::map<std::string, torch::Tensor>& got,
                        double tol) {
  REQUIRE(ref.size() == got.size());
  for (const auto& [name, t] : ref) {
    INFO("tensor " << name);
    REQUIRE(got.count(name) == 1);
    double diff = (got.at(name) - t).abs().max().item<double>();
    CHECK(diff <= tol);
  }
}

// Every rank's samples are disjoint and together are exactly [0, steps * global_batch).
void check_sample_cover(const TempDir& dir, const std::string& cfg, int world, uint64_t total) {
  std::multiset<uint64_t> all;
  for (int r = 0; r < world; ++r) {
    std::istringstream is(read_all(dir / (cfg + ".r" + std::to_string(r) + ".samples")));
    uint64_t s;
    while (is >> s) all.insert(s);
  }
  REQUIRE(all.size() == total);
  uint64_t expect = 0;
  for (uint64_t s : all) CHECK(s == expect++);
}

}  // namespace

TEST_CASE("dist: 2 and 3 ranks match 1 rank with and without ZeRO-1 at micro_num 1 and 2", "[dist][e2e]") {
  const std::string configs = "--configs m1 m2 m1z m2z --steps 4 --global-batch 12";
  TempDir d1("dist_w1"), d2("dist_w2"), d3("dist_w3");
  require_success(launch(1, "--out " + quote(d1.path()) + " " + configs, d1, "run"));
  for (const char* cfg : {"m1", "m2", "m1z", "m2z"}) check_sample_cover(d1, cfg, 1, 48);

  // At one rank, accumulation and ZeRO-1 (loom's AdamW) agree with plain torch::optim::AdamW.
  auto ref_losses = read_losses(d1 / "m1.losses");
  auto ref_weights = read_weights(d1 / "m1.r0.weights");
  REQUIRE(ref_losses.size() == 4);
  CHECK(ref_losses.at(3) < ref_losses.at(0));  // it learns
  for (const char* cfg : {"m2", "m1z", "m2z"}) {
    INFO("W=1 " << cfg << " vs m1");
    check_same_losses(ref_losses, read_losses(d1 / (std::string(cfg) + ".losses")));
    check_same_weights(ref_weights, read_weights(d1 / (std::string(cfg) + ".r0.weights")), kWeightTol);
  }

  for (int world : {2, 3}) {
    const TempDir& d = world == 2 ? d2 : d3;
    auto rs = launch(world, "--out " + quote(d.path()) + " " + configs, d, "run");
    require_success(rs);
    CHECK_THAT(rs[0].log, Catch::Contains("rank table (" + std::to_string(world) + " ranks)"));
    CHECK_THAT(rs[0].log, Catch::Contains("launch torchrun: run folder run_"));
    CHECK_THAT(rs[0].log, Catch::Contains("launched during backward"));
    for (const char* cfg : {"m1", "m2", "m1z", "m2z"}) {
      INFO("W=" << world << " " << cfg);
      check_sample_cover(d, cfg, world, 48);
      check_same_losses(read_losses(d1 / (std::string(cfg) + ".losses")), read_losses(d / (std::string(cfg) + ".losses")));
      auto w0 = read_weights(d / (std::string(cfg) + ".r0.weights"));
      check_same_weights(read_weights(d1 / (std::string(cfg) + ".r0.weights")), w0, kWeightTol);
      // Every rank holds bitwise the same parameters.
      for (int r = 1; r < world; ++r)
        check_same_weights(w0, read_weights(d / (std::string(cfg) + ".r" + std::to_string(r) + ".weights")), 0.0);
    }
  }
}

TEST_CASE("dist: ZeRO-1 checkpoint saved at 2 ranks resumes at 1 and 3 ranks", "[dist][e2e]") {
  const std::string common = " --configs m2z --steps 6 --global-batch 12";
  TempDir ref("dist_ref"), a("dist_save2"), b("dist_resume1"), c("dist_resume3");
  require_success(launch(1, "--out " + quote(ref.path()) + common, ref, "run"));
  const std::string ckpt = a / "ckpt";
  require_success(launch(2, "--out " + quote(a.path()) + common + " --save-at 3 --save-dir " + quote(ckpt), a, "run"));
  // One model file, one optimizer shard per rank.
  CHECK(loom::sys::exists(ckpt + "/model.safetensors"));
  CHECK(loom::sys::exists(ckpt + "/zero1_0.safetensors"));
  CHECK(loom::sys::exists(ckpt + "/zero1_1.safetensors"));

  auto ref_losses = read_losses(ref / "m2z.losses");
  REQUIRE(ref_losses.size() == 6);
  check_same_losses(ref_losses, read_losses(a / "m2z.losses"));
  for (int world : {1, 3}) {
    const TempDir& d = world == 1 ? b : c;
    require_success(launch(world, "--out " + quote(d.path()) + common + " --resume-from " + quote(ckpt), d, "run"));
    INFO("resumed at W=" << world);
    auto got = read_losses(d / "m2z.losses");
    REQUIRE(got.size() == 3);  // steps 3, 4, 5
    CHECK(got.begin()->first == 3);
    check_same_losses(ref_losses, got);
    check_same_weights(read_weights(ref / "m2z.r0.weights"), read_weights(d / "m2z.r0.weights"), kWeightTol);
    // Same data position: the resumed ranks read samples 36..71 of the stream, each once.
    std::multiset<uint64_t> all;
    for (int r = 0; r < world; ++r) {
      std::istringstream is(read_all(d / ("m2z.r" + std::to_string(r) + ".samples")));
      uint64_t s;
      while (is >> s) all.insert(s);
    }
    REQUIRE(all.size() == 36);
    CHECK(*all.begin() == 36);
    CHECK(*all.rbegin() == 71);
    CHECK(std::set<uint64_t>(all.begin(), all.end()).size() == 36);
  }
}

TEST_CASE("dist: a killed rank makes the others exit non-zero within the timeout", "[dist][e2e]") {
  TempDir d("dist_kill");
  const double timeout_s = 20;
  auto rs = launch(3, "--out " + quote(d.path()) + " --configs m1 --steps 4 --timeout-s 20 --fault die --fault-rank 1 --fault-step 1", d, "run");
  CHECK(rs[1].exit_code == 137);  // SIGKILL
  for (int r : {0, 2}) {
    INFO("rank " << r << " log:\n" << rs[r].log);
    CHECK(rs[r].exit_code == 1);
    // A dead peer is noticed at once (its sockets close), not after the timeout. Start-up under load
    // varies, so the clock starts at rank 1's death.
    CHECK(rs[r].seconds - rs[1].seconds < timeout_s);
    CHECK_THAT(rs[r].log, Catch::Contains("rank " + std::to_string(r) + " of 3 (host " + loom::sys::hostname() +
                                          ") at step 1: all_reduce of "));
    CHECK_THAT(rs[r].log, Catch::Contains(" over gloo failed: "));
    CHECK_THAT(rs[r].log, Catch::Contains("stalled past parallel.timeout_s=20"));
    CHECK_THAT(rs[r].log, Catch::Contains("NCCL_DEBUG=INFO"));
    CHECK_THAT(rs[r].log, Catch::Contains("NCCL_SOCKET_IFNAME"));
  }
}

TEST_CASE("dist: a rank that throws takes the job down and its reason reaches rank 0", "[dist][e2e]") {
  TempDir d("dist_throw");
  auto rs = launch(3, "--out " + quote(d.path()) + " --configs m1 --steps 4 --timeout-s 20 --fault throw --fault-rank 2 --fault-step 2", d, "run");
  INFO("rank 0 log:\n" << rs[0].log);
  CHECK(rs[2].exit_code == 1);
  CHECK_THAT(rs[2].log, Catch::Contains("injected fault at step 2"));
  CHECK(rs[0].exit_code == 1);
  CHECK(rs[1].exit_code == 1);
  CHECK(rs[0].seconds - rs[2].seconds < 20);
  CHECK_THAT(rs[0].log, Catch::Contains("rank 0 of 3 (host " + loom::sys::hostname() + ") at step 2: "));
  CHECK_THAT(rs[0].log, Catch::Contains("First failure reported by a peer: rank 2 (host " + loom::sys::hostname() +
                                        ") at step 2: injected fault at step 2"));
}

TEST_CASE("dist: a stalled rank makes the others time out with the report", "[dist][e2e]") {
  TempDir d("dist_stall");
  // Rank 1 stalls in step 1 until the FIFO is written, which happens only once rank 0 has exited:
  // rank 0 can only have ended by giving up on the collective, whatever the machine's speed.
  const std::string fifo = d / "release";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string args = "--out " + quote(d.path()) + " --configs m1 --steps 4 --timeout-s 2 --fault stall " +
                           "--fault-rank 1 --fault-step 1 --stall-until " + quote(fifo);
  auto rs = loom::test::launch_ranks(2, LOOM_DIST_WORKER_BIN, [&](int) { return args; }, d, "run", 120,
                                     "timeout 60 sh -c " + quote("echo go > " + quote(fifo)));
  INFO("rank 0 log:\n" << rs[0].log);
  CHECK(rs[0].exit_code == 1);
  CHECK_THAT(rs[0].log, Catch::Contains("rank 0 of 2 (host " + loom::sys::hostname() + ") at step 1: all_reduce of "));
  CHECK_THAT(rs[0].log, Catch::Contains("stalled past parallel.timeout_s=2"));
  INFO("rank 1 log:\n" << rs[1].log);
  CHECK(rs[1].exit_code != 0);  // released into a dead job
}

TEST_CASE("dist: scripts/launch/torchrun.sh runs the ranks with torchrun --no_python", "[dist][e2e]") {
  TempDir d("dist_torchrun");
  auto r = loom::test::run("bash " + quote(loom::test::source_dir() + "/scripts/launch/torchrun.sh") + " 2 " +
                           quote(LOOM_DIST_WORKER_BIN) + " --out " + quote(d.path()) + " --configs m1z --steps 2");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("rank table (2 ranks)"));
  CHECK_THAT(r.output, Catch::Contains("launch torchrun: run folder run_"));
  check_sample_cover(d, "m1z", 2, 24);
}
