// The trainer's data-safety rules at unit level: config values that would train into NaN weights,
// `latest` and --resume auto agreeing, the model keys compared on resume, the run folder's lock,
// state.json's counters in range.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "run_dir.h"
#include "test_util.h"
#include "train_state.h"

namespace loom {

namespace {

std::vector<std::string> base_args() { return {"--data.train_folder=unused"}; }

CheckpointContents small_contents(float v) {
  CheckpointContents c;
  c.model = {{"w", torch::full({2, 3}, v)}};
  c.optimizer = {{"step", torch::full({}, 1.0, torch::kFloat64)}};
  c.state_json = "{\"version\": 1}\n";
  c.config_ini = "[job]\nrun_dir = x\n";
  return c;
}

}  // namespace

TEST_CASE("non-finite or out-of-range optimizer values are refused at config time", "[safety]") {
  for (const std::string bad :
       {"--adam.lr=inf", "--adam.lr=nan", "--adam.lr=-1", "--adam.adam_beta1=nan", "--adam.adam_beta1=1",
        "--adam.adam_beta2=inf", "--adam.adam_eps=inf", "--adam.adam_eps=0", "--adam.weight_decay=inf",
        "--adam.weight_decay=-0.1", "--hybrid_zero_optimizer.clip_grad_norm=inf",
        "--hybrid_zero_optimizer.clip_grad_norm=-1", "--loss.label_smoothing=nan", "--loss.label_smoothing=inf",
        "--lr_scheduler.eta_min=inf"}) {
    INFO(bad);
    auto args = base_args();
    args.push_back(bad);
    const std::string key = bad.substr(2, bad.find('=') - 2);
    CHECK_THROWS_WITH(parse_train_config(args), Catch::Contains(key));
  }
  auto ok = base_args();
  ok.push_back("--hybrid_zero_optimizer.clip_grad_norm=0");
  CHECK(parse_train_config(ok).has_value());
}

TEST_CASE("resume auto picks what latest names when it validates and else walks back from there", "[safety]") {
  log::set_level(log::Level::kError);
  test::TempDir dir("safety_latest");
  Checkpointer ck({dir / "ck", 0});
  for (int64_t s : {1, 2, 4}) ck.save(s, small_contents(static_cast<float>(s)));
  CHECK(ck.find_latest_valid() == dir / "ck/step_4");
  // A resume from step_2 published step_2 again: step_4 belongs to the abandoned history.
  test::write_all(dir / "ck/latest", "step_2\n");
  CHECK(ck.find_latest_valid() == dir / "ck/step_2");
  // latest damaged: walk back below it, never up to step_4.
  test::write_all(dir / "ck/step_2/model.safetensors", "x");
  const Checkpointer::Choice c = ck.choose_resume();
  CHECK(c.dir == dir / "ck/step_1");
  REQUIRE(c.rejected.size() == 1);
  CHECK_THAT(c.rejected[0], Catch::StartsWith("step_2: ") && Catch::Contains("model.safetensors"));
  // A `latest` naming no folder here is ignored: the walk starts at the newest.
  test::write_all(dir / "ck/latest", "step_9\n");
  CHECK(ck.find_latest_valid() == dir / "ck/step_4");
  // The caller's own check rejects a candidate with its reason.
  const Checkpointer::Choice d = ck.choose_resume([](const std::string&, int64_t step) {
    LOOM_CHECK(step != 4, "state says otherwise");
  });
  CHECK(d.dir == dir / "ck/step_1");
  REQUIRE(d.rejected.size() == 2);
  CHECK_THAT(d.rejected[0], Catch::StartsWith("step_4: ") && Catch::Contains("state says otherwise"));
}

TEST_CASE("a checkpoint folder whose name disagrees with its manifest step is refused", "[safety]") {
  log::set_level(log::Level::kError);
  test::TempDir dir("safety_named");
  Checkpointer ck({dir / "ck", 0});
  ck.save(3, small_contents(3));
  sys::rename_file(dir / "ck/step_3", dir / "ck/step_20");
  CHECK(validate_checkpoint(dir / "ck/step_20") == 3);
  CHECK_THROWS_WITH(validate_checkpoint_named(dir / "ck/step_20"),
                    Catch::Contains("the folder is step_20 but its manifest says step 3"));
  const Checkpointer::Choice c = ck.choose_resume();
  CHECK(c.dir.empty());
  REQUIRE(c.rejected.size() == 1);
}

TEST_CASE("model keys that change the function are compared on resume but memory and precision keys are not",
          "[safety]") {
  const std::string saved =
      "resume = auto\n[job]\nrun_dir = a\n[model]\ncheckpoint = 0\ndtype = float32\nhidden_size = 32\n"
      "num_attention_heads = 4\nrope_base = 10000\n";
  CHECK(model_key_differences(saved, saved).empty());
  const std::string now =
      "[job]\nrun_dir = b\n[model]\ncheckpoint = 1\ndtype = bfloat16\nhidden_size = 32\nnum_attention_heads = 8\n"
      "rope_base = 500\n";
  CHECK(model_key_differences(saved, now) ==
        std::vector<std::string>{"model.num_attention_heads: 4 -> 8", "model.rope_base: 10000 -> 500"});
}

TEST_CASE("the run folder's lock: a second holder is refused with the first one's host and pid", "[safety]") {
  log::set_level(log::Level::kError);
  test::TempDir dir("safety_lock");
  const std::string run = dir / "run";
  {
    RunDirLock first(run);
    CHECK(test::read_all(first.path()) == sys::hostname() + " " + std::to_string(::getpid()) + "\n");
    // flock conflicts between two open files of one process too.
    CHECK_THROWS_WITH(RunDirLock(run), Catch::Contains("another loom-train run holds") &&
                                           Catch::Contains("host " + sys::hostname() + " pid " +
                                                           std::to_string(::getpid())));
  }
  RunDirLock again(run);  // released with its holder
}

TEST_CASE("a fresh run refuses a run folder with an earlier run and job.overwrite moves it aside", "[safety]") {
  log::set_level(log::Level::kError);
  test::TempDir dir("safety_fresh");
  const std::string run = dir / "run";
  RunDirLock lock(run);
  CHECK(prepare_fresh_run_dir(run, run + "/checkpoints", false).empty());  // only the lock: nothing to protect
  test::write_all(run + "/metrics.jsonl", "{}\n");
  Checkpointer({run + "/checkpoints", 0}).save(2, small_contents(2));
  CHECK_THROWS_WITH(prepare_fresh_run_dir(run, run + "/checkpoints", false),
                    Catch::Contains(run) && Catch::Contains("--resume auto") && Catch::Contains("job.overwrite") &&
                        Catch::Contains("step_2"));
  // --init-from inside the old run would move from under the run that reads it.
  CHECK_THROWS_WITH(prepare_fresh_run_dir(run, run + "/checkpoints", true, run + "/checkpoints/step_2"),
                    Catch::Contains("--init-from " + run + "/checkpoints/step_2 lies in the earlier run"));
  CHECK(sys::exists(run + "/metrics.jsonl"));
  const std::string aside = prepare_fresh_run_dir(run, run + "/checkpoints", true);
  CHECK_THAT(aside, Catch::StartsWith(run + ".old-"));
  CHECK(sys::exists(aside + "/metrics.jsonl"));
  CHECK(validate_checkpoint(aside + "/checkpoints/step_2") == 2);
  CHECK_FALSE(sys::exists(run + "/metrics.jsonl"));
  CHECK_FALSE(sys::exists(run + "/checkpoints"));
  CHECK(sys::exists(run + "/" + kRunDirLockName));
}

TEST_CASE("state.json counters past 2^63-1 are refused instead of read as negative", "[safety]") {
  TrainState t;
  t.step = 6;
  t.updates = 5;
  t.world_size = 2;
  t.cpu_rng_state_hex = "00ff";
  const std::string good = t.to_json();
  const TrainState back = TrainState::from_json(good, "state.json");
  CHECK(back.step == 6);
  CHECK(back.to_json() == good);
  // One case per int64 counter (step: a failure of fuzz/fuzz_train_state.cpp's round-trip check).
  for (const std::string key : {"step", "updates", "inf_nan_skips", "skipped_batches", "spike_skips", "world_size"}) {
    INFO(key);
    const std::string field = "\"" + key + "\": ";
    std::string bad = good;
    const size_t at = bad.find(field);
    REQUIRE(at != std::string::npos);
    const size_t end = bad.find(',', at);
    bad.replace(at, end - at, field + "9223372036854775808");
    CHECK_THROWS_WITH(TrainState::from_json(bad, "state.json"),
                      Catch::Contains("state.json: key '" + key + "' is 9223372036854775808, more than 2^63-1"));
  }
}

}  // namespace loom
