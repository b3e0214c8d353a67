// Fault tolerance of loom-train, end to end on the binary: kill -9 in a step and inside a
// checkpoint save, then --resume auto, equal an uninterrupted run bitwise; a planted hang is caught
// by the watchdog (exit 4, the phase named); planted NaN gradients and a planted loss spike are
// alerted (through monitor.alert_command), counted and skipped where configured; the stop file saves
// (-N) or saves and quits (+N); an async save writes the same checkpoint as a synchronous one; a dead
// webhook does not stop training. Data and model: loop_fixture.h's (tiny, ~1 s per run).
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <sstream>

#include "loom/sys.h"
#include "loop_fixture.h"
#include "test_util.h"
#include "train_process.h"

namespace {

using loom::test::quote;
using loom::test::read_all;
using loom::test::TempDir;

using Run = loom::test::TrainRun;

// 8 steps, a checkpoint every 2; extra replaces any of these keys.
Run train(const std::string& data, const std::string& run_dir, const std::vector<std::string>& extra) {
  return loom::test::run_train_process(data, run_dir, 8, extra);
}

std::map<int64_t, std::string> losses(const std::string& run_dir) {
  return loom::test::metric_text(run_dir + "/metrics.jsonl", "loss");
}

std::string field(const std::string& run_dir, int64_t step, const std::string& key) {
  const auto m = loom::test::metric_text(run_dir + "/metrics.jsonl", key);
  return m.count(step) ? m.at(step) : "";
}

std::string latest(const std::string& run_dir) { return read_all(run_dir + "/checkpoints/latest"); }

// An alert sink: every alert's JSON appended to a file.
std::string alert_sink(const std::string& file) { return "--monitor.alert_command=cat >> " + file; }

}  // namespace

TEST_CASE("fault: kill -9 in a step, then --resume auto, equals the uninterrupted run bitwise", "[fault]") {
  TempDir dir("fault_kill");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(dir / "data", dir / "ref", {}).exit_code == 0);

  Run killed = train(dir / "data", dir / "run", {"--debug.kill_at_step=5"});  // 0-based: after 5 steps
  INFO(killed.log);
  REQUIRE(killed.exit_code == 137);
  REQUIRE(latest(dir / "run") == "step_4\n");
  Run resumed = train(dir / "data", dir / "run", {"--resume=auto"});
  INFO(resumed.log);
  REQUIRE(resumed.exit_code == 0);
  REQUIRE(resumed.log.find("resumed from") != std::string::npos);
  REQUIRE(losses(dir / "run") == losses(dir / "ref"));  // steps 1..8, no duplicates, same digits
  REQUIRE(read_all(dir / "run/checkpoints/step_8/model.safetensors") ==
          read_all(dir / "ref/checkpoints/step_8/model.safetensors"));
}

TEST_CASE("fault: kill -9 inside a checkpoint save leaves the previous one, resume equals the uninterrupted run",
          "[fault]") {
  TempDir dir("fault_kill_save");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(dir / "data", dir / "ref", {}).exit_code == 0);

  Run killed = train(dir / "data", dir / "run", {"--debug.kill_in_save=6"});
  INFO(killed.log);
  REQUIRE(killed.exit_code == 137);
  REQUIRE(loom::sys::exists(dir / "run/checkpoints/step_6.tmp/model.safetensors"));  // half written
  REQUIRE(!loom::sys::exists(dir / "run/checkpoints/step_6"));
  REQUIRE(latest(dir / "run") == "step_4\n");
  Run resumed = train(dir / "data", dir / "run", {"--resume=auto"});
  INFO(resumed.log);
  REQUIRE(resumed.exit_code == 0);
  REQUIRE(resumed.log.find("step_4") != std::string::npos);
  REQUIRE(!loom::sys::exists(dir / "run/checkpoints/step_6.tmp"));  // the next save of step 6 replaced it
  REQUIRE(losses(dir / "run") == losses(dir / "ref"));
  REQUIRE(read_all(dir / "run/checkpoints/step_8/model.safetensors") ==
          read_all(dir / "ref/checkpoints/step_8/model.safetensors"));
}

TEST_CASE("fault: a planted hang is caught by the watchdog: report, alert, exit 4", "[fault]") {
  TempDir dir("fault_hang");
  loom::test::write_loop_data(dir / "data");
  const auto t0 = std::chrono::steady_clock::now();
  Run r = train(dir / "data", dir / "run",
                {"--debug.hang_at_step=3", "--monitor.hang_timeout=2", alert_sink(dir / "alerts.jsonl")});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.log);
  REQUIRE(r.exit_code == 4);
  REQUIRE(seconds < 30);
  REQUIRE(r.log.find("forward_backward") != std::string::npos);  // the phase it hung in
  const std::string alerts = read_all(dir / "alerts.jsonl");
  REQUIRE(alerts.find("\"level\": \"error\"") != std::string::npos);
  REQUIRE(alerts.find("forward_backward") != std::string::npos);
  REQUIRE(latest(dir / "run") == "step_2\n");  // what the launcher restarts from
}

TEST_CASE("fault: NaN gradients and a loss spike are alerted, counted and skipped", "[fault]") {
  TempDir dir("fault_spike");
  loom::test::write_loop_data(dir / "data");
  const std::string sink = dir / "alerts.jsonl";
  Run r = train(dir / "data", dir / "run",
                {"--debug.inject_nan_step=2", "--debug.spike_at_step=6", "--monitor.spike_ratio=3",
                 "--monitor.spike_window=3", "--monitor.skip_spike_batches=true", alert_sink(sink)});
  INFO(r.log);
  REQUIRE(r.exit_code == 0);
  const std::string alerts = read_all(sink);
  REQUIRE(alerts.find("update skipped (inf/NaN gradients)") != std::string::npos);
  REQUIRE(alerts.find("loss spike") != std::string::npos);
  REQUIRE(alerts.find("step 6 (0-based") != std::string::npos);
  REQUIRE(alerts.find("training started") != std::string::npos);
  REQUIRE(alerts.find("training finished") != std::string::npos);
  // 8 steps, one NaN skip (step index 2), one spike skip (index 6): 6 updates.
  const std::string state = read_all(dir / "run/checkpoints/step_8/state.json");
  REQUIRE(state.find("\"updates\": 6") != std::string::npos);
  REQUIRE(state.find("\"inf_nan_skips\": 1") != std::string::npos);
  REQUIRE(state.find("\"spike_skips\": 1") != std::string::npos);
  REQUIRE(field(dir / "run", 7, "skipped_this_step") == "1");
  REQUIRE(field(dir / "run", 8, "skipped_this_step") == "0");

  // Without skip_spike_batches the spike is only alerted: one fewer skipped update.
  Run alert_only = train(dir / "data", dir / "run2",
                         {"--debug.spike_at_step=6", "--monitor.spike_ratio=3", "--monitor.spike_window=3"});
  INFO(alert_only.log);
  REQUIRE(alert_only.exit_code == 0);
  REQUIRE(alert_only.log.find("loss spike") != std::string::npos);
  REQUIRE(read_all(dir / "run2/checkpoints/step_8/state.json").find("\"updates\": 8") != std::string::npos);
}

TEST_CASE("fault: the stop file saves at -N and saves and quits at +N", "[fault]") {
  TempDir dir("fault_stop_file");
  loom::test::write_loop_data(dir / "data");
  const std::string stop = dir / "stop";
  loom::test::write_all(stop, "-3\n");
  Run a = train(dir / "data", dir / "a", {"--ckpt.stop_file=" + stop, "--ckpt.checkpoint_every=0"});
  INFO(a.log);
  REQUIRE(a.exit_code == 0);
  REQUIRE(loom::sys::exists(dir / "a/checkpoints/step_3/manifest.json"));  // saved at 3 and went on
  REQUIRE(loom::sys::exists(dir / "a/checkpoints/step_8/manifest.json"));

  loom::test::write_all(stop, "+5");
  Run b = train(dir / "data", dir / "b", {"--ckpt.stop_file=" + stop});
  INFO(b.log);
  REQUIRE(b.exit_code == 0);
  REQUIRE(latest(dir / "b") == "step_5\n");
  REQUIRE(losses(dir / "b").rbegin()->first == 5);
}

TEST_CASE("fault: an async save writes what a synchronous save writes, a dead webhook does not stop training",
          "[fault]") {
  TempDir dir("fault_async");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(dir / "data", dir / "sync", {}).exit_code == 0);
  // Port 9 (discard) on loopback: nobody listens, every delivery fails fast and is logged.
  Run r = train(dir / "data", dir / "async",
                {"--ckpt.async_save=true", "--monitor.alert_webhook=http://127.0.0.1:9/hook",
                 "--monitor.alert_timeout_s=1"});
  INFO(r.log);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.log.find("in the background") != std::string::npos);
  for (int step : {2, 4, 6, 8}) {
    const std::string a = dir / ("async/checkpoints/step_" + std::to_string(step));
    const std::string s = dir / ("sync/checkpoints/step_" + std::to_string(step));
    INFO(a);
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json"})
      REQUIRE(read_all(a + "/" + f) == read_all(s + "/" + f));
  }
  REQUIRE(losses(dir / "async") == losses(dir / "sync"));
}
