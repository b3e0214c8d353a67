// loom-train itself as 1, 2 and 3 processes on loopback (Gloo), launched as torchrun would: the same
// global batch gives the same losses, validation and weights at any W, replicated or ZeRO-1, with
// micro_num 1 or 2; a checkpoint saved at W=2 (ZeRO-1) resumes at W=1 and at W=3 (replicated) at
// the same sample with the losses of the uninterrupted run, with the proportional data mixture too
// (every global batch holding the stated shares); only rank 0 writes the logs; a killed rank takes
// the job down with a report. The data and model are loop_fixture.h's.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>

#include "dist_harness.h"
#include "loom/progress.h"
#include "loom/sys.h"
#include "loop_fixture.h"
#include "safetensors.h"
#include "test_util.h"

namespace {

using loom::test::quote;
using loom::test::read_all;
using loom::test::TempDir;

using loom::test::RankResult;
using loom::test::require_success;

// loom-train as `world` ranks; rank `kill_rank` (if any) SIGKILLs itself in step 3
// (debug.kill_at_step). A rank stuck past 240 s is killed.
std::vector<RankResult> launch(int world, const std::vector<std::string>& args, const TempDir& dir,
                               const std::string& tag, int kill_rank = -1) {
  std::string cmd;
  for (const auto& a : args) cmd += " " + quote(a);
  return loom::test::launch_ranks(
      world, LOOM_TRAIN_BIN, [&](int r) { return cmd + (r == kill_rank ? " --debug.kill_at_step=3" : ""); }, dir,
      tag, 240);
}

// step -> value of key, from metrics.jsonl lines that have it.
std::map<int64_t, double> metric(const std::string& path, const std::string& key) {
  std::map<int64_t, double> m;
  for (const auto& [step, text] : loom::test::metric_text(path, key)) m[step] = std::stod(text);
  return m;
}

void require_close(const std::map<int64_t, double>& got, const std::map<int64_t, double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (const auto& [step, v] : want) {
    INFO("step " << step);
    REQUIRE(got.count(step));
    REQUIRE(std::abs(got.at(step) - v) <= rel * std::abs(v));
  }
}

void require_same_weights(const std::string& a, const std::string& b, double atol) {
  loom::safetensors::Reader ra(a), rb(b);
  REQUIRE(ra.names() == rb.names());
  for (const auto& name : ra.names()) {
    INFO(name);
    REQUIRE((ra.get(name) - rb.get(name)).abs().max().item<double>() <= atol);
  }
}

// The global batch is 12 packs at every W: micro_bsz * micro_num * W = 12.
std::vector<std::string> args(const std::string& data, const std::string& run, int world, int micro_num,
                              std::vector<std::string> extra = {}) {
  extra.push_back("--data.micro_num=" + std::to_string(micro_num));
  extra.push_back("--data.micro_bsz=" + std::to_string(12 / (world * micro_num)));
  extra.push_back("--model.dropout=0");  // dropout masks follow the rank, not the sample
  extra.push_back("--parallel.timeout_s=30");
  extra.push_back("--ckpt.checkpoint_every=3");
  extra.push_back("--data.valid_every=3");
  extra.push_back("--ckpt.keep=0");
  return loom::test::loop_args(data, run, std::move(extra));
}

// The run every distributed case is compared with: W=1, replicated, micro_num 2, into dir/NAME;
// its per-step losses and validation losses.
struct Reference {
  std::map<int64_t, double> loss, val;
};
Reference reference_run(const TempDir& dir, const std::string& data, const std::string& name) {
  require_success(launch(1, args(data, dir / name, 1, 2), dir, name));
  const std::string metrics = dir / (name + "/metrics.jsonl");
  return {metric(metrics, "loss"), metric(metrics, "val/alpha_loss")};
}

}  // namespace

TEST_CASE("dist loop: 2 and 3 ranks train like 1, replicated and ZeRO-1, micro_num 1 and 2", "[dist-loop]") {
  TempDir dir("dist_loop");
  loom::test::write_loop_data(dir / "data");
  const std::string data = dir / "data";
  const auto [loss, val] = reference_run(dir, data, "w1");
  REQUIRE(loss.size() == 6);
  REQUIRE(val.size() == 2);  // steps 3 and 6

  struct Case {
    int world, micro_num;
    const char* zero1;
  };
  for (const Case& c : {Case{2, 2, "1"}, Case{3, 1, "1"}, Case{2, 1, "-1"}, Case{3, 2, "-1"}, Case{1, 1, "-1"}}) {
    const std::string tag = "w" + std::to_string(c.world) + "m" + std::to_string(c.micro_num) + "z" + c.zero1;
    {  // one launch per case (a SECTION would re-run the reference for each)
      INFO(tag);
      const auto ranks =
          launch(c.world, args(data, dir / tag, c.world, c.micro_num, {std::string("--parallel.zero1=") + c.zero1}),
                 dir, tag);
      require_success(ranks);
      require_close(metric(dir / (tag + "/metrics.jsonl"), "loss"), loss, 1e-5);
      require_close(metric(dir / (tag + "/metrics.jsonl"), "val/alpha_loss"), val, 1e-5);
      // The same consumed samples and tokens as one rank.
      REQUIRE(metric(dir / (tag + "/metrics.jsonl"), "num_consumed_tokens") ==
              metric(dir / "w1/metrics.jsonl", "num_consumed_tokens"));
      require_same_weights(dir / (tag + "/checkpoints/step_6/model.safetensors"),
                           dir / "w1/checkpoints/step_6/model.safetensors", 2e-5);
      // Shards: one per rank with ZeRO-1 over every rank, none otherwise.
      const auto shards = loom::zero1_shard_files(dir / (tag + "/checkpoints/step_6"));
      REQUIRE(shards.size() == (std::string(c.zero1) == "-1" ? static_cast<size_t>(c.world) : 0u));
      // Rank 0 speaks for the job: the others print no metrics lines.
      REQUIRE(ranks[0].log.find("INFO step 6/6 loss ") != std::string::npos);
      for (int r = 1; r < c.world; ++r) REQUIRE(ranks[r].log.find(" step 6/6 ") == std::string::npos);
      // The rank is in the prefix only when there are several.
      REQUIRE((ranks[0].log.find(" rank 0] INFO") != std::string::npos) == (c.world > 1));
      if (c.world > 1) REQUIRE(ranks[0].log.find("rank table") != std::string::npos);
    }
  }
}

TEST_CASE("dist loop: saved at W=2 with ZeRO-1, resumed at W=1 (ZeRO-1) and W=3 (replicated)", "[dist-loop]") {
  TempDir dir("dist_loop_resume");
  loom::test::write_loop_data(dir / "data");
  const std::string data = dir / "data";
  const auto loss = reference_run(dir, data, "ref").loss;

  // W=2 stops after step 3 (as on SIGTERM: every rank at the same step) and saves.
  require_success(launch(2, args(data, dir / "w2", 2, 2, {"--parallel.zero1=-1", "--debug.stop_at_step=3"}), dir, "w2"));
  const std::string ckpt = dir / "w2/checkpoints/step_3";
  REQUIRE(loom::zero1_shard_files(ckpt).size() == 2);
  REQUIRE(read_all(ckpt + "/state.json").find("\"world_size\": 2") != std::string::npos);

  for (const auto& [world, zero1] : std::vector<std::pair<int, std::string>>{{1, "-1"}, {3, "1"}}) {
    const std::string tag = "resume_w" + std::to_string(world);
    {
      INFO(tag);
      const auto ranks =
          launch(world, args(data, dir / tag, world, 2, {"--parallel.zero1=" + zero1, "--resume=" + ckpt}), dir, tag);
      require_success(ranks);
      const auto got = metric(dir / (tag + "/metrics.jsonl"), "loss");
      REQUIRE(got.size() == 3);  // steps 4..6 only
      // The done line keeps this process's steps and tokens apart from the whole run's.
      const auto tokens = metric(dir / "ref/metrics.jsonl", "num_consumed_tokens");
      const auto count = [](double n) { return loom::format_count(static_cast<int64_t>(n)); };
      const std::string done = "done: step 6/6; this run: 3 steps, " + count(tokens.at(6) - tokens.at(3)) +
                               " tokens; whole run: " + count(tokens.at(6)) + " tokens, ";
      INFO(ranks[0].log);
      REQUIRE(ranks[0].log.find(done) != std::string::npos);
      std::map<int64_t, double> want(loss.find(4), loss.end());
      require_close(got, want, 1e-5);
      require_same_weights(dir / (tag + "/checkpoints/step_6/model.safetensors"),
                           dir / "ref/checkpoints/step_6/model.safetensors", 2e-5);
    }
  }
}

TEST_CASE("dist loop: the proportional mixture at W=2, resumed at W=3, trains like W=1 with 1:2 in every batch",
          "[dist-loop]") {
  TempDir dir("dist_loop_mixture");
  loom::test::write_loop_data(dir / "data");  // alpha 24 packs, beta 16
  const std::string data = dir / "data";
  const std::vector<std::string> mix = {"--data.dataset_weights=alpha:1,beta:2", "--data.mixture=proportional"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), mix.begin(), mix.end());
    return more;
  };
  require_success(launch(1, args(data, dir / "ref", 1, 2, with({})), dir, "ref"));
  const auto loss = metric(dir / "ref/metrics.jsonl", "loss");
  REQUIRE(loss.size() == 6);
  require_success(launch(2, args(data, dir / "w2", 2, 2, with({"--debug.stop_at_step=3"})), dir, "w2"));
  const auto ranks = launch(3, args(data, dir / "w3", 3, 2, with({"--resume=" + dir / "w2/checkpoints/step_3"})), dir, "w3");
  require_success(ranks);
  const auto got = metric(dir / "w3/metrics.jsonl", "loss");
  REQUIRE(got.size() == 3);
  require_close(got, std::map<int64_t, double>(loss.find(4), loss.end()), 1e-5);
  // Shares 1:2 make a cycle of 3 samples: each global batch of 12 holds exactly 4 alpha and 8 beta,
  // whatever W reads it. Rank 0 says so at the first metrics line (job.log_every 1) and, the mix
  // never moving, not again.
  REQUIRE(ranks[0].log.find("data mix step 4: alpha 33.3% beta 66.7%") != std::string::npos);
  REQUIRE(ranks[0].log.find("data mix step 5") == std::string::npos);
  REQUIRE(ranks[0].log.find("data mix step 6") == std::string::npos);
  // One ETA: on each metrics line but the last, and on no other line (the progress line has none).
  std::istringstream log(ranks[0].log);
  int metrics_lines = 0;
  for (std::string line; std::getline(log, line);) {
    INFO(line);
    const bool metrics_line = line.find("INFO step ") != std::string::npos;
    metrics_lines += metrics_line;
    REQUIRE(line.find("ETA") == std::string::npos);
    REQUIRE((line.find(" eta ") != std::string::npos) == (metrics_line && line.find("step 6/6") == std::string::npos));
  }
  REQUIRE(metrics_lines == 3);
}

TEST_CASE("dist loop: a killed rank takes the job down with a report", "[dist-loop]") {
  TempDir dir("dist_loop_kill");
  loom::test::write_loop_data(dir / "data");
  // Rank 1 kills itself in step 3; rank 0 then waits in that step's collective (timeout 30 s).
  const auto t0 = std::chrono::steady_clock::now();
  const auto ranks = launch(2, args(dir / "data", dir / "run", 2, 1, {"--data.total_steps=1000"}), dir, "kill",
                            /*kill_rank=*/1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("rank 0 log:\n" << ranks[0].log);
  REQUIRE(ranks[1].exit_code == 137);
  REQUIRE(ranks[0].exit_code != 0);
  REQUIRE(ranks[0].exit_code == 1);  // it went down by itself, with a loom::Error
  REQUIRE(seconds < 60);               // a closed socket is noticed at once, at worst after the 30 s timeout
  REQUIRE(ranks[0].log.find("rank 0 of 2") != std::string::npos);
  REQUIRE(ranks[0].log.find("at step 3") != std::string::npos);
  REQUIRE(ranks[0].log.find("NCCL_SOCKET_IFNAME") != std::string::npos);
}

// ZeRO stages 2 and 3 (gradients, then weights sharded) against the same W=1 replicated run: the
// same losses and final weights within fp32 reduction tolerance, at W = 1-4, hybrid (W=4, S=2),
// micro_num 1 and 2, with none, some and all layers recomputed.
TEST_CASE("dist loop: ZeRO stages 2 and 3 train like 1 rank at W 1-4, hybrid, micro_num 1 and 2, recompute",
          "[dist-loop]") {
  TempDir dir("dist_loop_zero");
  loom::test::write_loop_data(dir / "data");
  const std::string data = dir / "data";
  const auto [loss, val] = reference_run(dir, data, "w1");
  REQUIRE(loss.size() == 6);

  struct Case {
    int world, micro_num, stage;
    const char* zero1;
    const char* recompute;
  };
  for (const Case& c : {Case{2, 2, 2, "-1", "0"}, Case{3, 2, 3, "-1", "1"}, Case{4, 1, 3, "2", "0"},
                        Case{4, 1, 2, "-1", "0.5"}, Case{2, 1, 3, "-1", "0.5"}, Case{1, 2, 3, "-1", "0"}}) {
    const std::string tag = "w" + std::to_string(c.world) + "m" + std::to_string(c.micro_num) + "s" +
                            std::to_string(c.stage) + "z" + c.zero1 + "c" + c.recompute;
    INFO(tag);
    const auto ranks = launch(c.world,
                              args(data, dir / tag, c.world, c.micro_num,
                                   {std::string("--parallel.zero1=") + c.zero1,
                                    "--parallel.zero_stage=" + std::to_string(c.stage),
                                    std::string("--model.checkpoint=") + c.recompute}),
                              dir, tag);
    require_success(ranks);
    REQUIRE(ranks[0].log.find("ZeRO-" + std::to_string(c.stage) + ":") != std::string::npos);
    require_close(metric(dir / (tag + "/metrics.jsonl"), "loss"), loss, 1e-5);
    require_close(metric(dir / (tag + "/metrics.jsonl"), "val/alpha_loss"), val, 1e-5);
    require_same_weights(dir / (tag + "/checkpoints/step_6/model.safetensors"),
                         dir / "w1/checkpoints/step_6/model.safetensors", 2e-5);
    const int shards = std::string(c.zero1) == "-1" ? c.world : std::stoi(c.zero1);
    REQUIRE(loom::zero1_shard_files(dir / (tag + "/checkpoints/step_6")).size() == static_cast<size_t>(shards));
  }
}

// Saved at (W=4, stage 3), resumed at (W=2, stage 2), (W=1, replicated) and (W=3, stage 1): the
// losses of steps 4-6 are the uninterrupted run's.
TEST_CASE("dist loop: a ZeRO-3 checkpoint at W=4 resumes at W=2 stage 2, W=1 replicated, W=3 stage 1",
          "[dist-loop]") {
  TempDir dir("dist_loop_zero_resume");
  loom::test::write_loop_data(dir / "data");
  const std::string data = dir / "data";
  const auto loss = reference_run(dir, data, "ref").loss;
  require_success(launch(4,
                         args(data, dir / "w4", 4, 1,
                              {"--parallel.zero1=-1", "--parallel.zero_stage=3", "--debug.stop_at_step=3"}),
                         dir, "w4"));
  const std::string ckpt = dir / "w4/checkpoints/step_3";
  REQUIRE(loom::zero1_shard_files(ckpt).size() == 4);

  struct Case {
    int world;
    std::vector<std::string> flags;
  };
  for (const Case& c : {Case{2, {"--parallel.zero1=-1", "--parallel.zero_stage=2"}}, Case{1, {"--parallel.zero1=1"}},
                        Case{3, {"--parallel.zero1=-1", "--parallel.zero_stage=1"}}}) {
    const std::string tag = "resume_w" + std::to_string(c.world);
    INFO(tag);
    std::vector<std::string> flags = c.flags;
    flags.push_back("--resume=" + ckpt);
    require_success(launch(c.world, args(data, dir / tag, c.world, 2, flags), dir, tag));
    const auto got = metric(dir / (tag + "/metrics.jsonl"), "loss");
    REQUIRE(got.size() == 3);  // steps 4..6
    require_close(got, std::map<int64_t, double>(loss.find(4), loss.end()), 1e-5);
    require_same_weights(dir / (tag + "/checkpoints/step_6/model.safetensors"),
                         dir / "ref/checkpoints/step_6/model.safetensors", 2e-5);
  }
}

// The parameter storage each rank holds between steps, as the ranks measure it from their tensors'
// storages: at stage 3 over 4 ranks about a quarter of stage 1's (which holds whole weights).
TEST_CASE("dist loop: ZeRO-3 ranks hold a quarter of the weights at W=4", "[dist-loop]") {
  TempDir dir("dist_loop_zero_memory");
  loom::test::write_loop_data(dir / "data");
  const std::string data = dir / "data";
  auto resident = [&](const std::string& stage) {
    const std::string tag = "s" + stage;
    const auto ranks = launch(4,
                              args(data, dir / tag, 4, 1,
                                   {"--parallel.zero1=-1", "--parallel.zero_stage=" + stage, "--data.total_steps=1",
                                    "--model.hidden_size=64", "--model.num_layers=4"}),
                              dir, tag);
    require_success(ranks);
    const std::string key = "parameter bytes resident per rank: min ";
    const size_t at = ranks[0].log.find(key);
    REQUIRE(at != std::string::npos);
    std::istringstream in(ranks[0].log.substr(at + key.size()));
    double lo = 0, hi = 0;
    std::string word;
    in >> lo >> word >> hi;
    REQUIRE(word == "max");
    return std::make_pair(lo, hi);
  };
  const auto one = resident("1"), three = resident("3");
  INFO("stage 1: " << one.first << ".." << one.second << " bytes, stage 3: " << three.first << ".." << three.second);
  REQUIRE(one.first == one.second);  // whole weights everywhere
  REQUIRE(three.first >= 0.25 * one.first);
  REQUIRE(three.second <= 0.26 * one.first);  // a quarter, plus the padding of the last chunks
}

// Rank 1 dies in step 3 before layer 1's forward, after it gathered layer 0 with rank 0: rank 0's
// next collective is a gather of layer 1's weights.
TEST_CASE("dist loop: a rank killed at ZeRO stage 3 takes the job down with a report naming the gather",
          "[dist-loop]") {
  TempDir dir("dist_loop_zero_kill");
  loom::test::write_loop_data(dir / "data");
  const auto ranks = launch(2,
                            args(dir / "data", dir / "run", 2, 1,
                                 {"--data.total_steps=1000", "--parallel.zero1=-1", "--parallel.zero_stage=3",
                                  "--debug.kill_at_layer=1"}),
                            dir, "kill", /*kill_rank=*/1);
  INFO("rank 0 log:\n" << ranks[0].log);
  REQUIRE(ranks[1].exit_code == 137);
  REQUIRE(ranks[0].exit_code == 1);
  REQUIRE(ranks[0].log.find("at step 3") != std::string::npos);
  REQUIRE(ranks[0].log.find("all_gather") != std::string::npos);
}

// ckpt.async_save with sharded state: training waits for host copies only; every rank writes its
// shard from a background thread and rank 0 publishes the folder. The files are the synchronous
// save's, byte for byte, and the checkpoint resumes.
TEST_CASE("dist loop: async ZeRO-3 saves at W=2 write the synchronous bytes and resume", "[dist-loop]") {
  TempDir dir("dist_loop_zero_async");
  loom::test::write_loop_data(dir / "data");
  const std::string data = dir / "data";
  const std::vector<std::string> zero = {"--parallel.zero1=-1", "--parallel.zero_stage=3"};
  auto with = [&](std::vector<std::string> a, const std::string& extra) {
    a.push_back(extra);
    return a;
  };
  require_success(launch(2, args(data, dir / "sync", 2, 2, zero), dir, "sync"));
  const auto ranks = launch(2, args(data, dir / "async", 2, 2, with(zero, "--ckpt.async_save=true")), dir, "async");
  require_success(ranks);
  REQUIRE(ranks[0].log.find("training blocked") != std::string::npos);
  for (const char* step : {"step_3", "step_6"}) {
    const std::string a = dir / ("async/checkpoints/" + std::string(step)), s = dir / ("sync/checkpoints/" + std::string(step));
    INFO(step);
    REQUIRE(loom::validate_checkpoint(a) == std::stoi(std::string(step).substr(5)));
    for (const char* f : {"model.safetensors", "optimizer_zero1_0.safetensors", "optimizer_zero1_1.safetensors"}) {
      INFO(f);
      REQUIRE(read_all(a + "/" + f) == read_all(s + "/" + f));
    }
  }
  REQUIRE(read_all(dir / "async/checkpoints/latest") == "step_6\n");
  // Resumed at W=1 replicated from the async step 3: the synchronous run's losses for steps 4-6.
  require_success(launch(1,
                         args(data, dir / "resumed", 1, 2,
                              {"--parallel.zero1=1", "--resume=" + std::string(dir / "async/checkpoints/step_3")}),
                         dir, "resumed"));
  const auto loss = metric(dir / "sync/metrics.jsonl", "loss");
  require_close(metric(dir / "resumed/metrics.jsonl", "loss"), std::map<int64_t, double>(loss.find(4), loss.end()), 1e-5);
}

TEST_CASE("dist loop: a sharded save that fails on one rank fails on every rank at once, naming it", "[dist-loop]") {
  TempDir dir("dist_loop_save_fails");
  loom::test::write_loop_data(dir / "data");
  // ZeRO-1 over both ranks: each writes its optimizer shard into step_3.tmp/; rank 1's fails.
  std::string cmd;
  for (const auto& a : args(dir / "data", dir / "r", 2, 2, {"--parallel.zero1=-1", "--parallel.timeout_s=120"})) cmd += " " + quote(a);
  const auto rs = loom::test::launch_ranks(
      2, LOOM_TRAIN_BIN, [&](int r) { return cmd + (r == 1 ? " --debug.fail_save_at_step=3" : ""); }, dir, "run", 240);
  INFO("rank 0 log:\n" << rs[0].log << "\nrank 1 log:\n" << rs[1].log);
  CHECK(rs[1].exit_code == 1);
  CHECK_THAT(rs[1].log, Catch::Contains("checkpoint of step 3: writing the optimizer shards failed on this rank: "
                                        "debug.fail_save_at_step: injected failure"));
  CHECK(rs[0].exit_code == 1);
  CHECK_THAT(rs[0].log, Catch::Contains("checkpoint of step 3: writing the optimizer shards failed on another rank"));
  // Neither waited for the 120 s communicator timeout.
  CHECK(rs[0].seconds < 60);
  CHECK(rs[1].seconds < 60);
  CHECK_FALSE(loom::sys::exists(dir / "r/checkpoints/step_3"));
}
