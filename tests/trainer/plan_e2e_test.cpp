// `loom-train plan` and the plan loom-train checks at start, on the binary: the planned total
// against the peak RSS a real CPU run measures (peak_memory_mb in metrics.jsonl is VmHWM on the
// CPU), the refusal of a run that cannot fit before anything is allocated, and auto recompute.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <utility>

#include "loop_fixture.h"
#include "loom/cli.h"
#include "loom/sys.h"
#include "test_util.h"

namespace {

using loom::test::quote;
using loom::test::TempDir;

loom::test::RunResult tool(const std::string& sub, const std::vector<std::string>& args) {
  std::string cmd = quote(LOOM_TRAIN_BIN) + (sub.empty() ? "" : " " + sub);
  for (const auto& a : args) cmd += " " + quote(a);
  return loom::test::run(cmd + " 2>&1");
}

double json_number(const std::string& json, const std::string& key) {
  const std::string v = loom::test::json_field(json, key);
  return std::stod(v);
}

}  // namespace

TEST_CASE("plan: the planned total is within 15% of a CPU run's measured peak RSS", "[plan][e2e]") {
  TempDir dir("plan_rss");
  loom::test::write_loop_data(dir / "data");
  // Big enough that the model's state, not the runtime, is most of the process: 21 M parameters.
  const auto args = loom::test::loop_args(dir / "data", dir / "run",
                                          {"--model.hidden_size=384", "--model.num_layers=12", "--model.num_attention_heads=6",
                                           "--data.total_steps=2", "--model.dropout=0",
                                           "--ckpt.enable_save_ckpt=false", "--job.tensorboard=false"});
  const auto plan = tool("plan", [&] { auto a = args; a.push_back("--json"); return a; }());
  INFO(plan.output);
  REQUIRE(plan.exit_code == loom::kExitOk);
  const double planned = json_number(plan.output, "total");
  CHECK(json_number(plan.output, "num_parameters") == 21298560);
  const auto run = tool("", args);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const auto lines = loom::test::train_lines(dir / "run/metrics.jsonl");
  REQUIRE(lines.size() == 2);
  const double measured = json_number(lines.back(), "peak_memory_mb") * 1024 * 1024;
  INFO("planned " << planned / 1048576 << " MiB, measured peak RSS " << measured / 1048576 << " MiB");
  CHECK(std::abs(planned - measured) <= 0.15 * measured);
}

TEST_CASE("plan: a run that cannot fit is refused before anything is allocated", "[plan][e2e]") {
  TempDir dir("plan_refuse");
  loom::test::write_loop_data(dir / "data");
  // A 7B shape in fp32 on whatever this host has (112 GB of weights, gradients and moments).
  const auto args = loom::test::loop_args(dir / "data", dir / "run",
                                          {"--model.hidden_size=4096", "--model.num_layers=32",
                                           "--model.num_attention_heads=32", "--model.vocab_size=103168"});
  const auto r = tool("", args);
  INFO(r.output);
  CHECK(r.exit_code == loom::kExitFailed);
  CHECK_THAT(r.output, Catch::Contains("the memory plan needs") && Catch::Contains("the largest term is optimizer_state"));
  CHECK_FALSE(loom::sys::exists(dir / "run/metrics.jsonl"));
  // plan says the same with exit code 1: parameters and gradients alone exceed 80 GiB on one rank;
  // four ranks at ZeRO stage 3 share them.
  const auto p = tool("plan", [&] { auto a = args; a.push_back("--device-memory-gib=80"); return a; }());
  INFO(p.output);
  CHECK(p.exit_code == loom::kExitFailed);
  CHECK_THAT(p.output, Catch::Contains("does not fit") &&
                           Catch::Contains("would fit: a world size of 4 with parallel.zero1=-1 parallel.zero_stage=3"));
}

TEST_CASE("plan: model.checkpoint=auto recomputes nothing when all fits and some layers when memory is cut",
          "[plan][e2e]") {
  TempDir dir("plan_auto");
  loom::test::write_loop_data(dir / "data");
  const auto plan_json = [&](const std::string& checkpoint, const std::string& gib) {
    auto a = loom::test::loop_args(dir / "data", dir / "run",
                                   {"--model.checkpoint=" + checkpoint, "--job.attention=masked", "--data.micro_bsz=64",
                                    "--model.hidden_size=256", "--model.num_layers=8", "--json",
                                    "--device-memory-gib=" + gib});
    return tool("plan", a);
  };
  const auto roomy = plan_json("auto", "64");
  INFO(roomy.output);
  REQUIRE(roomy.exit_code == 0);
  CHECK(json_number(roomy.output, "checkpoint_fraction") == 0);
  // Cut the device to just above what recomputing every layer needs.
  const auto all = plan_json("1", "64");
  const double need_all = json_number(all.output, "total");
  const double need_none = json_number(roomy.output, "total");
  REQUIRE(need_none > need_all);
  const double margin = loom::ModelOptions{}.checkpoint_margin;  // model.checkpoint_margin's default
  const double gib = (need_all + 0.5 * (need_none - need_all)) / (1 - margin) / 1073741824.0;
  char cut_gib[64];
  std::snprintf(cut_gib, sizeof cut_gib, "%.9f", gib);
  const auto cut = plan_json("auto", cut_gib);
  INFO(cut.output);
  REQUIRE(cut.exit_code == 0);
  const double f = json_number(cut.output, "checkpoint_fraction");
  CHECK(f > 0);
  CHECK(f < 1);
}

TEST_CASE("plan: its flags take either spelling, and stage 3 over more ranks plans fewer bytes", "[plan][e2e]") {
  TempDir dir("plan_spelling");
  const auto args = loom::test::loop_args(dir / "data", dir / "run",
                                          {"--json", "--parallel.zero1=-1", "--parallel.zero_stage=3",
                                           "--device-memory-gib=16"});
  const auto dash = tool("plan", [&] { auto a = args; a.push_back("--world-size=4"); return a; }());
  const auto underscore = tool("plan", [&] { auto a = args; a.push_back("--world_size=4"); return a; }());
  const auto one = tool("plan", [&] { auto a = args; a.push_back("--device_memory_gib=16"); return a; }());
  INFO(dash.output << underscore.output << one.output);
  REQUIRE(dash.exit_code == 0);
  CHECK(underscore.output == dash.output);
  CHECK(json_number(dash.output, "world_size") == 4);
  CHECK(json_number(dash.output, "zero_stage") == 3);
  CHECK(json_number(dash.output, "parameters") < json_number(one.output, "parameters"));
}

TEST_CASE("plan: a size past its limit, 0 or negative exits 2 at once, naming the key", "[plan][e2e]") {
  const std::string max = "9223372036854775807", two62 = "4611686018427387904";
  const std::pair<std::string, std::string> cases[] = {
      {"--model.num_layers=" + max, "model.num_layers"},   {"--model.vocab_size=" + max, "model.vocab_size"},
      {"--data.seq_len=" + max, "data.seq_len"},           {"--data.micro_bsz=" + max, "data.micro_bsz"},
      {"--model.hidden_size=" + two62, "model.hidden_size"}, {"--model.mlp_ratio=1e300", "model.mlp_ratio"},
      {"--model.vocab_size=" + two62, "model.vocab_size"}, {"--model.num_layers=4294967295", "model.num_layers"},
      {"--model.hidden_size=0", "model.hidden_size"},      {"--data.micro_bsz=-1", "data.micro_bsz"},
      {"--world-size=1e300", "--world-size"},              {"--device-memory-gib=1e300", "--device-memory-gib"},
  };
  for (const auto& [arg, key] : cases) {
    INFO(arg);
    // `timeout` makes a plan that runs on (one of 2^32 - 1 layers ran for minutes) exit 124.
    const auto r = loom::test::run("timeout 30 " + quote(LOOM_TRAIN_BIN) + " plan --device-memory-gib=80 " + quote(arg) +
                                   " 2>&1");
    INFO(r.output);
    CHECK(r.exit_code == loom::kExitUsage);
    CHECK_THAT(r.output, Catch::Contains(key) && !Catch::Contains("fits"));
  }
  // A training run refuses them the same way, before reading its data.
  TempDir dir("plan_limits");
  const auto run = tool("", loom::test::loop_args(dir / "data", dir / "run", {"--data.seq_len=" + max}));
  INFO(run.output);
  CHECK(run.exit_code == loom::kExitUsage);
  CHECK_THAT(run.output, Catch::Contains("data.seq_len must be in [1, 16777216], got " + max));
}
