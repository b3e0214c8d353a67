// Resume and checkpoints end to end on the loom-train binary: nothing silently changed. A resume
// that changes model.dtype continues from the checkpoint's fp32 weights in both directions; a
// restart under lr_scheduler.on_resume=keep continues the schedule the checkpoint trained under;
// a resume with nothing to do writes nothing (and scripts/pipeline.mk's target is never a stand-in
// file); a checkpoint folder inside another run's checkpoint is refused; the messages of an
// asynchronous save, of a shared checkpoint folder and of `generate` say what happened.
// Data and model: loop_fixture.h's (tiny, ~1 s per run).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "checkpoint.h"
#include "loom/sys.h"
#include "loop_fixture.h"
#include "safetensors.h"
#include "test_util.h"
#include "train_process.h"

namespace {

using loom::test::quote;
using loom::test::read_all;
using loom::test::TempDir;

using Run = loom::test::TrainRun;

// 4 steps, a checkpoint every 2, all kept; extra replaces any of these keys.
Run train(const std::string& data, const std::string& run_dir, const std::vector<std::string>& extra) {
  return loom::test::run_train_process(data, run_dir, 4, extra);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Every tensor of `resumed` (a step_N folder saved by the resumed run, lr 0) holds the fp32 weights
// of `saved`: master.NAME where the resumed model is not fp32 (its model file holds them rounded),
// else the model file's NAME. The fp32 weights of `saved` are its master.NAME, else its NAME.
void check_same_fp32_weights(const std::string& saved, const std::string& resumed) {
  const loom::safetensors::Reader saved_model(saved + "/model.safetensors"), saved_opt(saved + "/optimizer.safetensors");
  const loom::safetensors::Reader model(resumed + "/model.safetensors"), opt(resumed + "/optimizer.safetensors");
  for (const std::string& name : saved_model.names()) {
    INFO(name);
    const torch::Tensor want = saved_opt.contains("master." + name) ? saved_opt.get("master." + name)
                                                                    : saved_model.get(name);
    REQUIRE(want.scalar_type() == torch::kFloat32);  // the model has no buffers: every tensor is a weight
    const bool master = opt.contains("master." + name);
    const torch::Tensor got = master ? opt.get("master." + name) : model.get(name);
    REQUIRE(got.scalar_type() == torch::kFloat32);
    CHECK(torch::equal(got, want));
    // The low-precision copy follows its master.
    if (master) CHECK(torch::equal(model.get(name), want.to(model.get(name).scalar_type())));
  }
}

}  // namespace

TEST_CASE("resume: a model.dtype change continues from the checkpoint's fp32 weights, both ways", "[resume]") {
  TempDir dir("resume_dtype");
  loom::test::write_loop_data(dir / "data");
  // The resumed run trains one more step at lr 0: its checkpoint holds exactly what it loaded.
  const std::vector<std::string> one_more = {"--resume=auto", "--data.total_steps=5", "--adam.lr=0",
                                             "--lr_scheduler.eta_min=0", "--lr_scheduler.on_resume=apply"};
  for (const auto& [from, to] : {std::make_pair("float32", "bfloat16"), std::make_pair("bfloat16", "float32")}) {
    INFO(from << " -> " << to);
    const std::string run = dir / (std::string(from) + "_to_" + to);
    Run first = train(dir / "data", run, {std::string("--model.dtype=") + from});
    INFO(first.log);
    REQUIRE(first.exit_code == 0);
    std::vector<std::string> extra = one_more;
    extra.push_back(std::string("--model.dtype=") + to);
    Run resumed = train(dir / "data", run, extra);
    INFO(resumed.log);
    REQUIRE(resumed.exit_code == 0);
    check_same_fp32_weights(run + "/checkpoints/step_4", run + "/checkpoints/step_5");
    const loom::safetensors::Reader bf16_opt(run + "/checkpoints/step_" + (std::string(to) == "bfloat16" ? "5" : "4") +
                                             "/optimizer.safetensors");
    int masters = 0;
    for (const std::string& n : bf16_opt.names()) masters += n.rfind("master.", 0) == 0;
    CHECK(masters > 0);  // the bf16 side kept fp32 masters, so the comparison above saw them
  }
  SECTION("into ZeRO-1 at one rank") {
    const std::string run = dir / "zero";
    REQUIRE(train(dir / "data", run, {"--model.dtype=float32"}).exit_code == 0);
    std::vector<std::string> extra = one_more;
    extra.insert(extra.end(), {"--model.dtype=bfloat16", "--parallel.zero1=-1"});
    Run resumed = train(dir / "data", run, extra);
    INFO(resumed.log);
    REQUIRE(resumed.exit_code == 0);
    // A sharded save: the masters are in the shard, the model file holds their bf16 copies.
    const loom::safetensors::Reader saved(run + "/checkpoints/step_4/model.safetensors");
    const loom::safetensors::Reader model(run + "/checkpoints/step_5/model.safetensors");
    for (const std::string& name : saved.names()) {
      INFO(name);
      CHECK(torch::equal(model.get(name), saved.get(name).to(model.get(name).scalar_type())));
    }
  }
}

TEST_CASE("resume: a restart under on_resume=keep continues the schedule the checkpoint trained under", "[resume]") {
  TempDir dir("resume_keep");
  loom::test::write_loop_data(dir / "data");
  const std::string run = dir / "run";
  REQUIRE(train(dir / "data", run, {}).exit_code == 0);  // a 4-step cosine, done
  // Extended to 8 under the old schedule (past its end the lr holds eta_min), stopped at 6, rerun.
  const std::vector<std::string> extend = {"--resume=auto", "--data.total_steps=8", "--lr_scheduler.on_resume=keep"};
  std::vector<std::string> stopped = extend;
  stopped.push_back("--debug.stop_at_step=6");
  Run a = train(dir / "data", run, stopped);
  INFO(a.log);
  REQUIRE(a.exit_code == 0);
  REQUIRE(read_all(run + "/checkpoints/latest") == "step_6\n");
  Run b = train(dir / "data", run, extend);
  INFO(b.log);
  REQUIRE(b.exit_code == 0);
  const auto lr = loom::test::metric_text(run + "/metrics.jsonl", "lr");
  REQUIRE(lr.size() == 8);
  for (int64_t step = 6; step <= 8; ++step) {
    INFO("step " << step);
    CHECK(lr.at(step) == lr.at(5));  // eta_min, the 4-step schedule's end
  }
  CHECK(lr.at(4) != lr.at(5));
}

TEST_CASE("resume: a checkpoint at data.total_steps is the end: nothing validated, logged or written again",
          "[resume]") {
  TempDir dir("resume_noop");
  loom::test::write_loop_data(dir / "data");
  const std::string run = dir / "run";
  REQUIRE(train(dir / "data", run, {"--job.tensorboard=true"}).exit_code == 0);
  const std::string metrics = read_all(run + "/metrics.jsonl");
  REQUIRE(count(metrics, "{\"step\": 4,") == 2);  // the step and its validation
  for (int i = 0; i < 2; ++i) {
    Run again = train(dir / "data", run, {"--job.tensorboard=true", "--resume=auto"});
    INFO(again.log);
    REQUIRE(again.exit_code == 0);
    CHECK_THAT(again.log, Catch::Contains("nothing to do"));
    CHECK(again.log.find("val/") == std::string::npos);
    CHECK(read_all(run + "/metrics.jsonl") == metrics);
  }
}

TEST_CASE("scripts/pipeline.mk: a run that ends before STEPS fails make, no stand-in step_STEPS file, and a rerun at "
          "the end trains nothing", "[resume]") {
  TempDir dir("resume_pipeline");
  loom::sys::make_dirs(dir / "in");
  loom::test::write_all(dir / "in/a.txt", read_all(loom::test::source_dir() + "/data_samples/botchan_head.txt"));
  loom::test::write_all(dir / "tiny.ini",
                        "[job]\nthreads = 1\n[data]\nseq_len = 999\nmicro_bsz = 2\nmicro_num = 1\ntotal_steps = 2\n"
                        "[model]\nhidden_size = 32\nnum_layers = 1\nnum_attention_heads = 2\nvocab_size = 2000\n"
                        "[ckpt]\ncheckpoint_every = 1\n");
  const std::string make = "make --no-print-directory -f " + quote(loom::test::source_dir() + "/scripts/pipeline.mk") +
                           " BIN=" + quote(LOOM_BINARY_DIR) +
                           " MODEL=" + quote(loom::test::source_dir() + "/data_samples/spm_2k.model") +
                           " INPUT_DIR=" + quote(dir / "in") + " OUT=" + quote(dir / "out") +
                           " CONFIG=" + quote(dir / "tiny.ini") + " SEQ_LEN=32";
  const std::string final_ckpt = dir / "out/run/checkpoints/step_2";
  auto stopped = loom::test::run(make + " TRAIN_ARGS=--debug.stop_at_step=1 2>&1");
  INFO(stopped.output);
  CHECK(stopped.exit_code != 0);
  CHECK_THAT(stopped.output, Catch::Contains("step_2"));
  CHECK_FALSE(loom::sys::exists(final_ckpt));
  auto done = loom::test::run(make + " 2>&1");
  INFO(done.output);
  REQUIRE(done.exit_code == 0);
  REQUIRE(loom::sys::is_directory(final_ckpt));
  const std::string metrics = read_all(dir / "out/run/metrics.jsonl");
  // A touched input is tokenized again; training resumes at step 2 of 2 and adds nothing.
  REQUIRE(loom::test::run("touch " + quote(dir / "in/a.txt")).exit_code == 0);
  auto again = loom::test::run(make + " 2>&1");
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("nothing to do"));
  CHECK(read_all(dir / "out/run/metrics.jsonl") == metrics);
  CHECK(loom::sys::is_directory(final_ckpt));
}

TEST_CASE("resume: a checkpoint folder inside another run's checkpoint is refused, with or without job.overwrite",
          "[resume]") {
  TempDir dir("resume_nested");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(dir / "data", dir / "a", {}).exit_code == 0);
  const std::string step_2 = dir / "a/checkpoints/step_2";
  for (const char* overwrite : {"false", "true"}) {
    INFO("job.overwrite=" << overwrite);
    Run b = train(dir / "data", dir / "b",
                  {"--ckpt.save_ckpt_folder=" + step_2 + "/mine", std::string("--job.overwrite=") + overwrite});
    INFO(b.log);
    CHECK(b.exit_code == 2);
    CHECK_THAT(b.log, Catch::Contains("ckpt.save_ckpt_folder " + step_2 + "/mine") &&
                          Catch::Contains("inside the loom checkpoint " + step_2));
    CHECK_FALSE(loom::sys::exists(step_2 + "/mine"));
    CHECK(loom::validate_checkpoint_named(step_2) == 2);
  }
  Run resumed = train(dir / "data", dir / "a", {"--resume=auto", "--data.total_steps=6", "--lr_scheduler.on_resume=apply"});
  INFO(resumed.log);
  CHECK(resumed.exit_code == 0);
}

TEST_CASE("resume: another run's checkpoint folder is refused naming the folder and that run", "[resume]") {
  TempDir dir("resume_shared");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(dir / "data", dir / "a", {}).exit_code == 0);
  Run b = train(dir / "data", dir / "b", {"--ckpt.save_ckpt_folder=" + dir / "a/checkpoints"});
  INFO(b.log);
  CHECK(b.exit_code == 1);
  CHECK_THAT(b.log, Catch::Contains("ckpt.save_ckpt_folder " + dir / "a/checkpoints") &&
                        Catch::Contains("the run in " + dir / "a") && Catch::Contains("step_4"));
}

TEST_CASE("resume: an asynchronous save logs 'training blocked' once, and debug.kill_in_save kills inside it",
          "[resume]") {
  TempDir dir("resume_async");
  loom::test::write_loop_data(dir / "data");
  Run r = train(dir / "data", dir / "run", {"--ckpt.async_save=true"});
  INFO(r.log);
  REQUIRE(r.exit_code == 0);
  CHECK(count(r.log, "training blocked") == 2);  // steps 2 and 4
  Run killed = train(dir / "data", dir / "killed", {"--ckpt.async_save=true", "--debug.kill_in_save=4"});
  INFO(killed.log);
  CHECK(killed.exit_code == 137);
  CHECK(loom::sys::exists(dir / "killed/checkpoints/step_4.tmp/model.safetensors"));
  CHECK_FALSE(loom::sys::exists(dir / "killed/checkpoints/step_4"));
  CHECK(read_all(dir / "killed/checkpoints/latest") == "step_2\n");
}

TEST_CASE("generate: a bad --temperature is a usage error (exit 2) before the checkpoint is read", "[resume]") {
  TempDir dir("resume_generate");
  auto r = loom::test::run(quote(LOOM_TRAIN_BIN) + " generate --checkpoint " + quote(dir / "none") +
                           " --prompt-ids 1,2 --temperature -1 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--temperature"));
}
