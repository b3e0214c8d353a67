#include <catch2/catch.hpp>

#include <sstream>

#include "checkpoint.h"
#include "config.h"
#include "loop_fixture.h"
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
  CHECK_FALSE(sys::exists(dir / "r/checkpoints"));
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
