#include <catch2/catch.hpp>

#include <sstream>

#include "checkpoint.h"
#include "config.h"
#include "data_manifest.h"
#include "determinism.h"
#include "evaluator.h"
#include "loader.h"
#include "lr_schedule.h"
#include "startup.h"
#include "loop_fixture.h"
#include "loom/cli.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "test_util.h"
#include "train_state.h"
#include "trainer.h"

using namespace loom;

namespace {

using loom::test::train_lines;
std::string field(const std::string& line, const std::string& key) { return loom::test::json_field(line, key); }

TrainState read_state(const std::string& dir) {
  return TrainState::from_json(test::read_all(dir + "/state.json"), dir);
}

}  // namespace

TEST_CASE("exact resume: N steps equal N/2 + resume + N/2 bit for bit") {
  log::set_level(log::Level::kWarn);
  test::TempDir dir("loop_resume");
  test::write_loop_data(dir / "data");

  const TrainSummary a = train(test::loop_config(dir / "data", dir / "a"));
  CHECK(a.final_step == 6);
  CHECK_FALSE(a.stopped_by_signal);

  // Half, stopped as by SIGTERM (checkpoint written at step 3), then --resume auto.
  const TrainSummary b1 = train(test::loop_config(dir / "data", dir / "b", {"--debug.stop_at_step=3"}));
  CHECK(b1.stopped_by_signal);
  CHECK(b1.final_step == 3);
  CHECK(read_state(dir / "b/checkpoints/step_3").step == 3);
  const TrainSummary b2 = train(test::loop_config(dir / "data", dir / "b", {"--resume=auto"}));
  CHECK(b2.steps_done == 3);
  CHECK(b2.final_step == 6);

  const auto la = train_lines(dir / "a/metrics.jsonl");
  const auto lb = train_lines(dir / "b/metrics.jsonl");
  REQUIRE(la.size() == 6);
  REQUIRE(lb.size() == 6);  // the resumed run continued the same file: steps 1..6 once each
  for (size_t i = 0; i < 6; ++i) {
    INFO("step " << i + 1);
    CHECK(field(la[i], "step") == std::to_string(i + 1));
    CHECK(field(lb[i], "step") == field(la[i], "step"));
    CHECK(field(lb[i], "loss") == field(la[i], "loss"));
    CHECK(field(lb[i], "grad_norm") == field(la[i], "grad_norm"));
    CHECK(field(lb[i], "lr") == field(la[i], "lr"));
    CHECK(field(lb[i], "consumed_samples") == field(la[i], "consumed_samples"));
  }
  // The loss falls on this learnable data.
  CHECK(std::stod(field(la[5], "loss")) < std::stod(field(la[0], "loss")));
  // Weights and optimizer state: the same bytes.
  CHECK(test::read_all(dir / "a/checkpoints/step_6/model.safetensors") ==
        test::read_all(dir / "b/checkpoints/step_6/model.safetensors"));
  CHECK(test::read_all(dir / "a/checkpoints/step_6/optimizer.safetensors") ==
        test::read_all(dir / "b/checkpoints/step_6/optimizer.safetensors"));
  const TrainState sa = read_state(dir / "a/checkpoints/step_6"), sb = read_state(dir / "b/checkpoints/step_6");
  CHECK(sa.sampler.consumed_samples == 6 * 4);
  CHECK(sb.sampler.consumed_samples == sa.sampler.consumed_samples);
  CHECK(sb.consumed_tokens == sa.consumed_tokens);
  CHECK(sb.cpu_rng_state_hex == sa.cpu_rng_state_hex);
  CHECK(sa.updates == 6);
}

TEST_CASE("inf or NaN gradients skip the update and hold the LR schedule") {
  log::set_level(log::Level::kError);
  test::TempDir dir("loop_nan");
  test::write_loop_data(dir / "data");
  train(test::loop_config(dir / "data", dir / "r", {"--debug.inject_nan_step=2", "--data.total_steps=4"}));
  const auto l = train_lines(dir / "r/metrics.jsonl");
  REQUIRE(l.size() == 4);
  CHECK(field(l[1], "inf_nan_skip_batches") == "0");
  CHECK(field(l[2], "skipped_this_step") == "1");
  CHECK(field(l[2], "inf_nan_skip_batches") == "1");
  CHECK(field(l[2], "grad_norm") == "NaN");
  CHECK(field(l[3], "skipped_this_step") == "0");
  // Step 4 (the third successful update) runs at the lr the skipped step would have had.
  CHECK(field(l[3], "lr") == field(l[2], "lr"));
  const TrainState s = read_state(dir / "r/checkpoints/step_4");
  CHECK(s.updates == 3);
  CHECK(s.inf_nan_skips == 1);
  // Weights stayed finite.
  safetensors::Reader m(dir / "r/checkpoints/step_4/model.safetensors");
  for (const auto& n : m.names()) CHECK(torch::isfinite(m.get(n)).all().item<bool>());
}

TEST_CASE("skip_batches consumes the data without an update") {
  log::set_level(log::Level::kError);
  test::TempDir dir("loop_skip");
  test::write_loop_data(dir / "data");
  train(test::loop_config(dir / "data", dir / "r", {"--data.skip_batches=1-2", "--data.total_steps=4"}));
  const TrainState s = read_state(dir / "r/checkpoints/step_4");
  CHECK(s.step == 4);
  CHECK(s.updates == 2);
  CHECK(s.skipped_batches == 2);
  CHECK(s.sampler.consumed_samples == 16);
  const auto l = train_lines(dir / "r/metrics.jsonl");
  REQUIRE(l.size() == 2);
  CHECK(field(l[0], "step") == "1");
  CHECK(field(l[1], "step") == "4");
  CHECK(field(l[1], "skip_batches") == "2");
}

TEST_CASE("resume auto falls back past a damaged newest checkpoint") {
  log::set_level(log::Level::kError);
  test::TempDir dir("loop_fallback");
  test::write_loop_data(dir / "data");
  train(test::loop_config(dir / "data", dir / "r", {"--ckpt.checkpoint_every=2", "--ckpt.keep=0", "--data.total_steps=4"}));
  // Damage step_4's weights: --resume auto must take step_2 and redo steps 3-4.
  std::string w = test::read_all(dir / "r/checkpoints/step_4/model.safetensors");
  w[w.size() - 3] ^= 0x40;
  test::write_all(dir / "r/checkpoints/step_4/model.safetensors", w);
  const TrainSummary s = train(test::loop_config(dir / "data", dir / "r", {"--resume=auto", "--ckpt.checkpoint_every=2", "--data.total_steps=4"}));
  CHECK(s.steps_done == 2);
  CHECK(s.final_step == 4);
  CHECK_NOTHROW(validate_checkpoint(dir / "r/checkpoints/step_4"));
  // An explicit damaged folder is refused with the reason.
  test::write_all(dir / "r/checkpoints/step_2/state.json", "{}");
  CHECK_THROWS_WITH(train(test::loop_config(dir / "data", dir / "r", {"--resume=" + dir / "r/checkpoints/step_2"})),
                    Catch::Contains("state.json: 2 bytes, the manifest says"));
}

TEST_CASE("model.precision: fp8 is refused on the CPU before the model is built, bad values by name") {
  log::set_level(log::Level::kError);
  test::TempDir dir("loop_fp8");
  test::write_loop_data(dir / "data");
  CHECK_THROWS_WITH(train(test::loop_config(dir / "data", dir / "r", {"--model.precision=fp8", "--model.dtype=bfloat16"})),
                    Catch::Contains("model.precision=fp8: ") && Catch::Contains("(model.precision=bf16 runs here)"));
  CHECK_FALSE(sys::lexists(dir / "r"));  // a refused start removes the run folder it made
  CHECK_THROWS_WITH(parse_train_config({"--job.run_dir=x", "--data.train_folder=y", "--model.precision=fp16"}),
                    Catch::Contains("model.precision='fp16': expected bf16 or fp8"));
  CHECK_THROWS_WITH(parse_train_config({"--job.run_dir=x", "--data.train_folder=y", "--model.precision=fp8"}),
                    Catch::Contains("model.precision=fp8 needs model.dtype=bfloat16, got float32"));
  const auto c = parse_train_config({"--job.run_dir=x", "--data.train_folder=y", "--model.precision=fp8",
                                     "--model.dtype=bf16"});
  REQUIRE(c);
  CHECK(c->model.fp8);
}

TEST_CASE("train config rejects unknown keys and names bad values") {
  CHECK_THROWS_WITH(parse_train_config({"--job.run_dir=x", "--data.train_folder=y", "--adam.lrr=1"}),
                    Catch::Contains("unrecognised option '--adam.lrr=1'"));
  CHECK_THROWS_WITH(parse_train_config({"--job.run_dir=x", "--data.train_folder=y", "--loss.label_smoothing=1.5"}),
                    Catch::Contains("loss.label_smoothing must be in [0, 1), got 1.5"));
  auto c = parse_train_config({"--job.run_dir=x", "--data.train_folder=y", "--adam.lr=0.5"});
  REQUIRE(c);
  CHECK(c->adam.lr == 0.5);
  CHECK(c->ckpt.folder == "x/checkpoints");
  // Doubles as the shortest text that reads back as the same value, not 0.90000000000000002.
  CHECK(c->resolved_ini.find("[adam]\nadam_beta1 = 0.9\nadam_beta2 = 0.95\nadam_eps = 1e-08\n") != std::string::npos);
  CHECK(c->resolved_ini.find("lr = 0.5\n") != std::string::npos);
  // What a run prints at start: only what differs from the defaults.
  CHECK(c->changed_ini == "[adam]\nlr = 0.5\n[data]\ntrain_folder = y\n[job]\nrun_dir = x\n");
  auto same = parse_train_config({"--job.run_dir=x", "--data.train_folder=y", "--adam.adam_beta1=0.9"});
  REQUIRE(same);
  CHECK(same->changed_ini.find("adam_beta1") == std::string::npos);  // given, but equal to the default
}

TEST_CASE("a checkpoint's config.ini written with 17 digits matches this run's shortest text") {
  const std::string old_ini = "[model]\nlayer_norm_epsilon = 1.0000000000000001e-05\nrope_base = 10000\n";
  const std::string now_ini = "[model]\nlayer_norm_epsilon = 1e-05\nrope_base = 10000\n";
  CHECK(model_key_differences(old_ini, now_ini).empty());
  CHECK(model_key_differences(old_ini, "[model]\nlayer_norm_epsilon = 1e-06\nrope_base = 10000\n") ==
        std::vector<std::string>{"model.layer_norm_epsilon: 1.0000000000000001e-05 -> 1e-06"});
  CHECK(ini_value(now_ini, "model.rope_base") == "10000");
  CHECK(ini_value(now_ini, "data.micro_bsz").empty());
}

TEST_CASE("a resume that changes the schedule is refused, or applies or keeps it as lr_scheduler.on_resume says") {
  log::set_level(log::Level::kError);
  test::TempDir dir("loop_schedule_resume");
  test::write_loop_data(dir / "data");
  // 4 steps of a 4-step cosine (warmup 1), then the run asked for 8.
  const std::vector<std::string> first = {"--data.total_steps=4", "--lr_scheduler.warmup_ratio=0.25"};
  for (const char* run : {"refuse", "apply", "keep"}) {
    INFO(run);
    const std::string r = dir / run;
    train(test::loop_config(dir / "data", r, first));
    auto more = [&](std::vector<std::string> extra) {
      extra.insert(extra.end(), {"--data.total_steps=8", "--lr_scheduler.warmup_ratio=0.25", "--resume=auto"});
      return test::loop_config(dir / "data", r, extra);
    };
    if (std::string(run) == "refuse") {
      CHECK_THROWS_AS(train(more({})), UsageError);
      CHECK_THROWS_WITH(train(more({})), Catch::Contains("data.total_steps: 4 -> 8") &&
                                             Catch::Contains("--lr_scheduler.on_resume=apply") &&
                                             Catch::Contains("--lr_scheduler.on_resume=keep"));
      CHECK(test::train_lines(r + "/metrics.jsonl").size() == 4);  // nothing trained or written
      continue;
    }
    train(more({std::string("--lr_scheduler.on_resume=") + run}));
    const auto lines = test::train_lines(r + "/metrics.jsonl");
    REQUIRE(lines.size() == 8);
    // An 8-step cosine with warmup 2 at updates 4..7, or the 4-step one's end: eta_min (1e-5).
    LrScheduleOptions eight;
    eight.base_lr = 0.01, eight.eta_min = 1e-5, eight.total_steps = 8, eight.warmup_ratio = 0.25;
    for (int64_t e = 4; e < 8; ++e) {
      INFO("update " << e);
      const double lr = std::stod(field(lines[static_cast<size_t>(e)], "lr"));
      CHECK(lr == Approx(std::string(run) == "apply" ? LrSchedule(eight).lr(e) : 1e-5).epsilon(1e-12));
    }
  }
}

TEST_CASE("schedule_on_resume: the checkpoint's keys against the run's, one key at a time") {
  test::TempDir dir("schedule_on_resume");
  test::write_loop_data(dir / "data");
  const TrainConfig saved = test::loop_config(dir / "data", dir / "r", {"--lr_scheduler.kind=wsd"});
  sys::make_dirs(dir / "ckpt");
  test::write_all(dir / "ckpt/config.ini", saved.resolved_ini);
  CHECK(schedule_on_resume(dir / "ckpt", saved.lr_schedule_options(), "refuse", 3) == saved.lr_schedule_options());
  const TrainConfig lower = test::loop_config(dir / "data", dir / "r", {"--lr_scheduler.kind=wsd", "--adam.lr=0.005"});
  CHECK_THROWS_WITH(schedule_on_resume(dir / "ckpt", lower.lr_schedule_options(), "refuse", 3),
                    Catch::Contains("adam.lr: 0.01 -> 0.005"));
  CHECK(schedule_on_resume(dir / "ckpt", lower.lr_schedule_options(), "apply", 3).base_lr == 0.005);
  CHECK(schedule_on_resume(dir / "ckpt", lower.lr_schedule_options(), "keep", 3).base_lr == 0.01);
  const TrainConfig warm = test::loop_config(dir / "data", dir / "r", {"--lr_scheduler.kind=wsd", "--lr-warmup-iters=2"});
  CHECK_THROWS_WITH(schedule_on_resume(dir / "ckpt", warm.lr_schedule_options(), "refuse", 3),
                    Catch::Contains("lr_scheduler.warmup_steps: -1 -> 2"));
  // A checkpoint from before the key was saved used the ratio: its absence reads as -1.
  std::string old_ini = saved.resolved_ini;
  old_ini.erase(old_ini.find("warmup_steps = -1\n"), std::string("warmup_steps = -1\n").size());
  test::write_all(dir / "ckpt/config.ini", old_ini);
  CHECK(schedule_on_resume(dir / "ckpt", saved.lr_schedule_options(), "refuse", 3) == saved.lr_schedule_options());
  CHECK(schedule_on_resume(dir / "ckpt", warm.lr_schedule_options(), "keep", 3).warmup_steps == -1);
}

TEST_CASE("validation: data.valid_micro_num caps the batches, a stop request ends it within one batch") {
  log::set_level(log::Level::kError);
  test::TempDir dir("eval_cap");
  test::write_loop_dataset(dir / "valid/alpha", 3, 8);  // 8 packs: 4 micro-batches of 2
  const TrainConfig c = test::loop_config(dir / "", dir / "r", {"--data.valid_folder=" + (dir / "valid")});
  ValidationSets sets(c.data, 0, 1);
  REQUIRE(sets.num_micro_batches(0) == 4);
  torch::manual_seed(3);
  InternLM model(c.model);
  const Evaluation all = evaluate(model, sets, torch::kCPU);
  REQUIRE(all.results.size() == 1);
  CHECK(all.results[0].tokens > 0);
  EvalOptions one;
  one.max_micro_batches = 1;
  const Evaluation capped = evaluate(model, sets, torch::kCPU, nullptr, one);
  REQUIRE(capped.results.size() == 1);
  CHECK(capped.results[0].tokens * 4 == all.results[0].tokens);  // every pack holds 14 tokens in two documents
  int asked = 0;
  EvalOptions stop;
  stop.stop = [&] { return ++asked == 3; };  // the third batch sees the request
  const Evaluation stopped = evaluate(model, sets, torch::kCPU, nullptr, stop);
  CHECK(stopped.interrupted);
  CHECK(stopped.results.empty());
  CHECK(asked == 3);
}

TEST_CASE("the data a checkpoint trained on: recorded, compared on resume, another tokenizer refused") {
  log::set_level(log::Level::kError);
  test::TempDir dir("loop_data_resume");
  test::write_loop_data(dir / "data", 0x1234);
  train(test::loop_config(dir / "data", dir / "r", {"--data.total_steps=2"}));
  const TrainState saved = read_state(dir / "r/checkpoints/step_2");
  const DataManifest m = DataManifest::from_json(saved.data_json, "state.json");
  CHECK(m.seq_len == test::kLoopSeqLen);
  CHECK(m.tokenizer.model_fingerprint == 0x1234);
  REQUIRE(m.datasets.size() == 2);
  CHECK(m.datasets[0].name == "alpha");
  REQUIRE(m.datasets[0].shards.size() == 1);
  CHECK(m.datasets[0].shards[0].file == "part0.bin");
  CHECK(m.datasets[0].shards[0].packs == 24);
  CHECK(DataManifest::from_json(m.to_json(), "again").to_json() == m.to_json());
  CHECK(m.mixture == "scaled");
  // A record from before data.mixture existed reads as the scaled mixture it was trained with.
  std::string old = m.to_json();
  const std::string key = "\"mixture\": \"scaled\", ";
  REQUIRE(old.find(key) != std::string::npos);
  old.erase(old.find(key), key.size());
  CHECK(DataManifest::from_json(old, "old").to_json() == m.to_json());
  DataManifest blend = m;
  blend.mixture = "proportional";
  CHECK(data_changes(m, blend, "ckpt") == std::vector<std::string>{"data.mixture scaled -> proportional"});

  // The same data: nothing to say. More data and another weight: named, one phrase each.
  CHECK(data_changes(m, m, "ckpt").empty());
  DataManifest more = m;
  more.datasets[0].weight = 2;
  more.datasets[1].shards.push_back({"part1.bin", 5, 42});
  more.datasets[1].shards[0].bin_xxh64 ^= 1;
  more.datasets.push_back({"gamma", 1, {{"part0.bin", 3, 7}}});
  CHECK(data_changes(m, more, "ckpt") == std::vector<std::string>{"datasets added: gamma", "dataset alpha: weight 1 -> 2",
                                                                   "dataset beta: 1 shard added, 1 shard with other contents"});
  // Another tokenizer: refused, by the one tokenizer check, naming what differs.
  test::write_loop_data(dir / "other", 0x5678);
  CHECK_THROWS_WITH(train(test::loop_config(dir / "other", dir / "r", {"--data.total_steps=4", "--resume=auto"})),
                    Catch::Contains("model_fingerprint") && Catch::Contains("step_2"));
}

// job.deterministic's process-wide state, undone when a test ends: later tests in one process (a
// direct run of this binary) see LibTorch's defaults.
struct DeterministicStateGuard {
  ~DeterministicStateGuard() {
    at::globalContext().setDeterministicAlgorithms(false, false);
    at::globalContext().setDeterministicCuDNN(false);
    sys::unset_env("CUBLAS_WORKSPACE_CONFIG");
    sys::unset_env("NCCL_NVLS_ENABLE");
  }
};

// CPU runs of one seed are bitwise equal with or without the flag (loom's CPU kernels add in a
// fixed order): what this shows is that the mode is set up before the run and changes no result
// on the CPU. The GPU test (gpu_determinism_test.cpp) shows what it changes there.
TEST_CASE("job.deterministic: two runs of one seed write bitwise the same losses and weights") {
  DeterministicStateGuard guard;
  log::set_level(log::Level::kWarn);
  REQUIRE_FALSE(at::globalContext().deterministicAlgorithms());
  test::TempDir dir("loop_deterministic");
  test::write_loop_data(dir / "data");
  // Two intra-op threads: where a reduction's order could depend on scheduling.
  const std::vector<std::string> extra = {"--job.deterministic=true", "--job.threads=2"};
  const TrainSummary a = train(test::loop_config(dir / "data", dir / "a", extra));
  CHECK(at::globalContext().deterministicAlgorithms());
  CHECK(sys::get_env("CUBLAS_WORKSPACE_CONFIG") == ":4096:8");
  CHECK(sys::get_env("NCCL_NVLS_ENABLE") == "0");
  const TrainSummary b = train(test::loop_config(dir / "data", dir / "b", extra));
  const auto la = train_lines(dir / "a/metrics.jsonl");
  const auto lb = train_lines(dir / "b/metrics.jsonl");
  REQUIRE(la.size() == 6);
  REQUIRE(lb.size() == 6);
  for (size_t i = 0; i < la.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(field(la[i], "loss") == field(lb[i], "loss"));
    CHECK(field(la[i], "grad_norm") == field(lb[i], "grad_norm"));
  }
  REQUIRE_FALSE(a.last_checkpoint.empty());
  REQUIRE_FALSE(b.last_checkpoint.empty());
  CHECK(test::read_all(a.last_checkpoint + "/model.safetensors") == test::read_all(b.last_checkpoint + "/model.safetensors"));
  CHECK(test::read_all(a.last_checkpoint + "/optimizer.safetensors") ==
        test::read_all(b.last_checkpoint + "/optimizer.safetensors"));
}

TEST_CASE("job.deterministic refuses an environment that defeats it") {
  DeterministicStateGuard guard;
  sys::set_env("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  CHECK_THROWS_WITH(enable_deterministic_mode(), Catch::Contains("CUBLAS_WORKSPACE_CONFIG=:4096:8 or :16:8") &&
                                                     Catch::Contains("sets ':0:0'"));
  sys::set_env("CUBLAS_WORKSPACE_CONFIG", ":16:8");
  sys::set_env("NCCL_NVLS_ENABLE", "1");
  CHECK_THROWS_WITH(enable_deterministic_mode(), Catch::Contains("NCCL_NVLS_ENABLE=1"));
  sys::set_env("NCCL_NVLS_ENABLE", "0");
  enable_deterministic_mode();
  CHECK(sys::get_env("CUBLAS_WORKSPACE_CONFIG") == ":16:8");  // the user's valid choice is kept
  CHECK(at::globalContext().deterministicAlgorithms());
}
