// End-to-end tests of the loom-train binary (its path arrives as LOOM_TRAIN_BIN): exit codes and
// messages of bad command lines, what a run leaves in run_dir, SIGTERM then --resume auto against
// an uninterrupted run bit for bit, --profiling's trace, a corrupt checkpoint. The data is
// loop_fixture.h's (written with the packer's PackedWriter); the model is tiny, so each run takes
// about a second, most of it LibTorch's start.
#include <catch2/catch.hpp>

#include <set>
#include <sstream>

#include "loop_fixture.h"
#include "loom/cli.h"
#include "loom/json_text.h"
#include "loom/sys.h"
#include "test_util.h"

namespace {

using loom::test::quote;
using loom::test::read_all;
using loom::test::TempDir;

std::string cli(const std::vector<std::string>& args) {
  std::string s = "timeout -s KILL 120 " + quote(LOOM_TRAIN_BIN);
  for (const auto& a : args) s += " " + quote(a);
  return s;
}

loom::test::RunResult train(const std::vector<std::string>& args) { return loom::test::run(cli(args) + " 2>&1"); }

using loom::test::train_lines;
std::string field(const std::string& line, const std::string& key) { return loom::test::json_field(line, key); }

// Runs a Python check (Debian's python3, json module only) on one path argument; returns its stdout.
std::string py_check(const TempDir& dir, const std::string& name, const std::string& code, const std::string& arg) {
  const std::string script = dir / (name + ".py");
  loom::test::write_all(script, code);
  auto r = loom::test::run(quote(loom::test::python()) + " " + quote(script) + " " + quote(arg) + " 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// Every line is one JSON object; training lines have every documented field; prints the steps.
const char* kPyMetrics = R"(
import json, sys
need = ["step", "consumed_samples", "num_consumed_tokens", "loss", "acc", "perplexity", "lr", "grad_norm",
        "inf_nan_skip_batches", "skip_batches", "skipped_this_step", "tokens_per_s", "tgs", "tflops", "hardware_tflops",
        "step_time", "data_time", "fwd_bwd_time", "optimizer_time", "peak_memory_mb"]
steps = []
for n, line in enumerate(open(sys.argv[1]), 1):
    d = json.loads(line)
    assert isinstance(d, dict), n
    if "loss" not in d: continue
    missing = [k for k in need if k not in d]
    assert not missing, (n, missing)
    names = [k[5:] for k in d if k.startswith("loss/")]  # the datasets this step drew from
    assert names and all(k in d for x in names for k in ("acc/" + x, "plex/" + x)), (n, d)
    steps.append(d["step"])
print(" ".join(str(s) for s in steps))
)";

// The trace: ProfilerStep# ranges, and for each the number of matrix-multiply ops inside it; the
// number of such ops outside every step range.
const char* kPyTrace = R"(
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
steps = sorted((e["name"], e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#"))
mm = [e for e in ev if e["name"] in ("aten::mm", "aten::addmm")]
counts = [sum(1 for e in mm if a <= e["ts"] and e["ts"] + e["dur"] <= b) for _, a, b in steps]
inside = sum(counts)
print(" ".join(n for n, _, _ in steps))
print(" ".join(str(c) for c in counts))
print(len(mm) - inside)
)";

// The configuration as the run printed it ("loom-train configuration (...):" then the INI).
std::string printed_config(const std::string& log) {
  const std::string head = "INFO loom-train configuration (what differs from the defaults";
  const size_t at = log.find(head);
  if (at == std::string::npos) return "<not printed>";
  const size_t begin = log.find('\n', at) + 1;
  return log.substr(begin, log.find("\n[loom ", begin) - begin);
}

// The log lines that contain `what`.
std::vector<std::string> lines_with(const std::string& log, const std::string& what) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find(what) != std::string::npos) out.push_back(line);
  return out;
}

std::string trim_newlines(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

TEST_CASE("loom-train: --help, an unknown key and bad values give the documented exit codes", "[cli]") {
  TempDir dir("cli_args");
  auto help = train({"--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::Contains("--data.micro_bsz") && Catch::Contains("--profiling"));
  CHECK_THAT(help.output, Catch::Contains("loom-train plan ...") && Catch::Contains("Exit codes"));
  // Defaults in their shortest text: (=0.9), not (=0.90000000000000002).
  CHECK_THAT(help.output, Catch::Contains("(=0.9)") && Catch::Contains("(=1e-05)") && !Catch::Contains("0000000"));
  // Booleans as true/false, as config.ini and the start-up dump write them: not (=1)/(=0).
  CHECK_THAT(help.output,
             Catch::Contains("--job.tensorboard arg (=true)") && Catch::Contains("--job.overwrite arg (=false)"));
  auto bogus = train({"bogus"});
  CHECK(bogus.exit_code == loom::kExitUsage);
  CHECK_THAT(bogus.output, Catch::Contains("unknown subcommand 'bogus'"));

  const auto base = loom::test::loop_args(dir / "data", dir / "run");
  auto with = [&](const std::string& extra) {
    auto a = base;
    a.push_back(extra);
    return train(a);
  };
  auto unknown = with("--adam.lrr=1");
  CHECK(unknown.exit_code == loom::kExitUsage);
  CHECK_THAT(unknown.output, Catch::Contains("adam.lrr"));
  auto range = train(loom::test::loop_args(dir / "data", dir / "run", {"--loss.label_smoothing=1.5"}));
  CHECK(range.exit_code == loom::kExitUsage);
  CHECK_THAT(range.output, Catch::Contains("loss.label_smoothing"));
  // An error about the user's input: one line, no source location, no rank in a single process.
  CHECK(lines_with(range.output, "ERROR").size() == 1);
  CHECK_THAT(range.output, !Catch::Contains(".cpp:") && !Catch::Contains(" rank 0]") && !Catch::Contains("ALERT"));
  auto type = train(loom::test::loop_args(dir / "data", dir / "run", {"--data.micro_bsz=two"}));
  CHECK(type.exit_code == loom::kExitUsage);
  CHECK_THAT(type.output, Catch::Contains("data.micro_bsz"));
  // Nothing was trained: no run folder content.
  CHECK_FALSE(loom::sys::exists(dir / "run/metrics.jsonl"));
}

TEST_CASE("loom-train: a run's outputs, SIGTERM then --resume auto equals an uninterrupted run bit for bit",
          "[cli]") {
  TempDir dir("cli_run");
  loom::test::write_loop_data(dir / "data");
  constexpr int kSteps = 100;
  const std::vector<std::string> common = {"--data.total_steps=" + std::to_string(kSteps), "--ckpt.keep=0"};
  auto args = [&](const std::string& run, std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), common.begin(), common.end());
    return loom::test::loop_args(dir / "data", dir / run, extra);
  };

  // The uninterrupted run and what it leaves.
  auto a = train(args("a"));
  INFO(a.output.substr(a.output.size() > 4000 ? a.output.size() - 4000 : 0));
  REQUIRE(a.exit_code == 0);
  const std::string steps_a = py_check(dir, "metrics_a", kPyMetrics, dir / "a/metrics.jsonl");
  // A CPU and no job.peak_tflops: no peak to measure against, so no mfu or hfu at all.
  CHECK_THAT(loom::test::read_all(dir / "a/metrics.jsonl"), !Catch::Contains("\"mfu\"") && !Catch::Contains("\"hfu\""));
  std::string expect_steps;
  for (int s = 1; s <= kSteps; ++s) expect_steps += (s > 1 ? " " : "") + std::to_string(s);
  CHECK(trim_newlines(steps_a) == expect_steps);
  const std::string events = dir / "a/tensorboard/events.out.tfevents.loom";
  REQUIRE(loom::sys::exists(events));
  const std::string ev = read_all(events);
  CHECK_THAT(ev, Catch::Contains("brain.Event:2") && Catch::Contains("loss"));
  const std::string ckpt_a = dir / ("a/checkpoints/step_" + std::to_string(kSteps));
  REQUIRE(loom::sys::exists(ckpt_a + "/config.ini"));
  // Every key is saved with the run and with each checkpoint; the start prints only what differs
  // from the defaults (each printed line is one of the saved ones).
  CHECK(read_all(ckpt_a + "/config.ini") == read_all(dir / "a/config.ini"));
  const std::string printed = printed_config(a.output);
  CHECK_THAT(printed, Catch::Contains("keep = 0") && Catch::Contains("hidden_size = 32") && !Catch::Contains("total_steps") &&
                          !Catch::Contains("tensorboard = true") && !Catch::Contains("adam_beta1"));
  {
    std::istringstream in(printed);
    for (std::string line; std::getline(in, line);) {
      INFO(line);
      CHECK_THAT(read_all(ckpt_a + "/config.ini"), Catch::Contains(line));
    }
  }

  // The same run, paused after step 5 (debug.pause_at_step) until the script, reading its log as it
  // is written, sees the pause and sends SIGTERM: the next step ends, a checkpoint, exit 0. No timing
  // is assumed: the run cannot finish before the signal.
  const std::string b_dir = dir / "b";
  const std::string script = "mkdir -p " + quote(b_dir) + "\nmkfifo " + quote(b_dir + ".fifo") + "\n" +
                             cli(args("b", {"--debug.pause_at_step=5"})) + " > " + quote(b_dir + ".fifo") +
                             " 2>&1 &\npid=$!\n"
                             "while IFS= read -r line; do\n"
                             "  printf '%s\\n' \"$line\" >> " + quote(b_dir + ".log") + "\n"
                             "  case \"$line\" in *'waiting for a signal'*) kill -TERM $pid;; esac\n"
                             "done < " + quote(b_dir + ".fifo") + "\n"
                             "wait $pid\necho \"rc=$?\"\n";
  loom::test::write_all(dir / "b.sh", script);
  auto b = loom::test::run("bash " + quote(dir / "b.sh"));
  const std::string b_log = read_all(b_dir + ".log");
  INFO(b_log.substr(b_log.size() > 4000 ? b_log.size() - 4000 : 0));
  CHECK_THAT(b.output, Catch::Contains("rc=0"));
  REQUIRE_THAT(b_log, Catch::Contains("signal 15 received"));
  const auto lines_b = train_lines(b_dir + "/metrics.jsonl");
  const int stopped = static_cast<int>(lines_b.size());
  REQUIRE(stopped == 6);  // paused after 5 steps; the step after the signal still ends
  REQUIRE(stopped < kSteps);
  const std::string ckpt_b = b_dir + "/checkpoints/step_" + std::to_string(stopped);
  REQUIRE(loom::sys::exists(ckpt_b + "/state.json"));
  CHECK_THAT(read_all(ckpt_b + "/state.json"), Catch::Contains("\"step\": " + std::to_string(stopped) + ","));
  CHECK(trim_newlines(read_all(b_dir + "/checkpoints/latest")) == "step_" + std::to_string(stopped));

  // Resumed: the remaining steps; every step logged once; losses and weights equal run a's.
  auto c = train(args("b", {"--resume=auto"}));
  INFO(c.output.substr(c.output.size() > 4000 ? c.output.size() - 4000 : 0));
  REQUIRE(c.exit_code == 0);
  CHECK(trim_newlines(py_check(dir, "metrics_b", kPyMetrics, b_dir + "/metrics.jsonl")) == expect_steps);
  const auto la = train_lines(dir / "a/metrics.jsonl"), lb = train_lines(b_dir + "/metrics.jsonl");
  REQUIRE(la.size() == lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    INFO("step " << i + 1 << " (stopped at " << stopped << ")");
    CHECK(field(lb[i], "loss") == field(la[i], "loss"));
    CHECK(field(lb[i], "grad_norm") == field(la[i], "grad_norm"));
  }
  const std::string ckpt_bn = b_dir + "/checkpoints/step_" + std::to_string(kSteps);
  CHECK(read_all(ckpt_bn + "/model.safetensors") == read_all(ckpt_a + "/model.safetensors"));
  CHECK(read_all(ckpt_bn + "/optimizer.safetensors") == read_all(ckpt_a + "/optimizer.safetensors"));
}

TEST_CASE("loom-train --profiling: a chrome trace of exactly steps 2-4 with the matmuls inside them", "[cli]") {
  TempDir dir("cli_prof");
  loom::test::write_loop_data(dir / "data");
  auto r = train(loom::test::loop_args(dir / "data", dir / "p", {"--data.total_steps=7", "--profiling"}));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, !Catch::Contains("WARN profiler"));
  const std::string trace = dir / "p/profile_trace.json";
  REQUIRE(loom::sys::exists(trace));
  std::istringstream out(py_check(dir, "trace", kPyTrace, trace));
  std::string names, counts, outside;
  std::getline(out, names), std::getline(out, counts), std::getline(out, outside);
  CHECK(names == "ProfilerStep#2 ProfilerStep#3 ProfilerStep#4");
  // The same work each step: the same positive number of matmuls, none outside the steps.
  std::istringstream cs(counts);
  std::vector<int> c;
  for (int x; cs >> x;) c.push_back(x);
  REQUIRE(c.size() == 3);
  CHECK(c[0] > 0);
  CHECK(c[1] == c[0]);
  CHECK(c[2] == c[0]);
  CHECK(outside == "0");

  // A run shorter than the window records what there is.
  auto s = train(loom::test::loop_args(dir / "data", dir / "s", {"--data.total_steps=3", "--profiling"}));
  REQUIRE(s.exit_code == 0);
  std::istringstream out_s(py_check(dir, "trace_s", kPyTrace, dir / "s/profile_trace.json"));
  std::getline(out_s, names);
  CHECK(names == "ProfilerStep#2");

  // The trace cannot be written (a folder holds its name): one warning, the run goes on.
  loom::sys::make_dirs(dir / "w/profile_trace.json");
  auto w = train(loom::test::loop_args(dir / "data", dir / "w", {"--data.total_steps=5", "--profiling"}));
  INFO(w.output);
  CHECK(w.exit_code == 0);
  const size_t warn = w.output.find("WARN profiler: no trace written");
  CHECK(warn != std::string::npos);
  CHECK(w.output.find("WARN profiler", warn + 1) == std::string::npos);
  CHECK(loom::sys::exists(dir / "w/checkpoints/step_5/model.safetensors"));
}

TEST_CASE("loom-train --resume with a corrupt checkpoint exits 1 naming the file", "[cli]") {
  TempDir dir("cli_corrupt");
  loom::test::write_loop_data(dir / "data");
  auto r = train(loom::test::loop_args(dir / "data", dir / "r", {"--data.total_steps=2"}));
  REQUIRE(r.exit_code == 0);
  const std::string ckpt = dir / "r/checkpoints/step_2";
  std::string w = read_all(ckpt + "/model.safetensors");
  w[w.size() - 5] ^= 0x10;
  loom::test::write_all(ckpt + "/model.safetensors", w);
  auto bad = train(loom::test::loop_args(dir / "data", dir / "r", {"--data.total_steps=4", "--resume=" + ckpt}));
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, Catch::Contains("model.safetensors"));
  // The exception is printed once (no ALERT copy before the ERROR line), without a source location.
  INFO(bad.output);
  CHECK(lines_with(bad.output, "ERROR").size() == 1);
  CHECK_THAT(bad.output, !Catch::Contains("ALERT") && !Catch::Contains(".cpp:"));
}

TEST_CASE("loom-train's log for people: a short metrics line, the last step always logged, no rank at W=1",
          "[cli]") {
  TempDir dir("cli_log");
  loom::test::write_loop_data(dir / "data");
  // Stopped as by SIGTERM after step 5, which job.log_every=2 would pass over.
  auto r = train(loom::test::loop_args(dir / "data", dir / "r",
                                       {"--data.total_steps=8", "--job.log_every=2", "--debug.stop_at_step=5",
                                        "--monitor.diag_every=2", "--job.peak_tflops=0.4"}));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> steps;
  const auto lines = train_lines(dir / "r/metrics.jsonl");
  for (const auto& l : lines) steps.push_back(field(l, "step"));
  CHECK(steps == std::vector<std::string>{"2", "4", "5"});
  // Every number in metrics.jsonl is the shortest text that reads back as the same double.
  for (const auto& l : lines) {
    for (const char* key : {"loss", "lr", "grad_norm", "step_time", "tgs", "mfu", "hfu", "acc"}) {
      const std::string text = field(l, key);
      INFO(key << " = " << text);
      const double v = std::strtod(text.c_str(), nullptr);
      if (text.find_first_of(".e") != std::string::npos) CHECK(loom::json_number(v) == text);
      CHECK(text.size() <= 24);
    }
    CHECK(field(l, "micro_num") == "2");
  }
  // The human line: step N/total and the figures people watch, well under 200 characters.
  const auto human = lines_with(r.output, "INFO step ");
  REQUIRE(human.size() == 3);
  CHECK_THAT(human.back(), Catch::Contains("INFO step 5/8 loss "));
  for (const auto& h : human) {
    INFO(h);
    CHECK(h.size() < 200);
    for (const char* f : {" loss ", " lr ", " grad_norm ", " tgs ", " mfu ", " mem ", " micro_num 2", " eta "})
      CHECK_THAT(h, Catch::Contains(f));
  }
  CHECK_THAT(r.output, !Catch::Contains("metrics step=") && !Catch::Contains("0000000"));
  // One process: no rank in the prefix, no per-rank spread, no alert lines without an alert sink.
  CHECK_THAT(r.output, Catch::Contains("[loom ") && !Catch::Contains(" rank 0]") && !Catch::Contains("rank(s)") &&
                           !Catch::Contains("slowest rank") && !Catch::Contains("ALERT"));
  CHECK_THAT(r.output, Catch::Contains("health: step time "));

  // total_steps that job.log_every does not divide: the last step and the validation are logged.
  auto v = train(loom::test::loop_args(dir / "data", dir / "v", {"--data.total_steps=3", "--job.log_every=2"}));
  INFO(v.output);
  REQUIRE(v.exit_code == 0);
  steps.clear();
  for (const auto& l : train_lines(dir / "v/metrics.jsonl")) steps.push_back(field(l, "step"));
  CHECK(steps == std::vector<std::string>{"2", "3"});
  const auto val = lines_with(v.output, "INFO validation at step 3: alpha loss ");
  REQUIRE(val.size() == 1);
  CHECK_THAT(val[0], Catch::Contains(" acc ") && Catch::Contains(" ppl "));
  CHECK(val[0].size() < 200);
}

TEST_CASE("loom-train: a resume that changes the global batch says so, with the old and the new", "[cli]") {
  TempDir dir("cli_batch");
  loom::test::write_loop_data(dir / "data");
  auto a = train(loom::test::loop_args(dir / "data", dir / "r", {"--data.total_steps=4", "--debug.stop_at_step=2"}));
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  CHECK_THAT(a.output, !Catch::Contains("global batch changes"));
  // The same sizes: no warning.
  // (Other total_steps: the schedule's change applies, lr_scheduler.on_resume.)
  auto same = train(loom::test::loop_args(dir / "data", dir / "r",
                                          {"--data.total_steps=3", "--resume=auto", "--lr_scheduler.on_resume=apply"}));
  INFO(same.output);
  REQUIRE(same.exit_code == 0);
  CHECK_THAT(same.output, !Catch::Contains("global batch changes"));
  // Half the micro-batches per step (as a larger world size with the same micro_num would do).
  auto b = train(loom::test::loop_args(dir / "data", dir / "r",
                                       {"--data.total_steps=4", "--data.micro_num=1", "--resume=auto",
                                        "--lr_scheduler.on_resume=apply"}));
  INFO(b.output);
  REQUIRE(b.exit_code == 0);
  CHECK_THAT(b.output, Catch::Contains("WARN the global batch changes on this resume: 4 packs per step (micro_bsz 2 x "
                                       "micro_num 2 x world size 1) before, 2 now (micro_bsz 2 x micro_num 1 x world "
                                       "size 1)"));
  CHECK_THAT(b.output, Catch::Contains("data.micro_num = 2"));
}
