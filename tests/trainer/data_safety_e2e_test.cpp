// End-to-end data-safety rules of loom-train (its path arrives as LOOM_TRAIN_BIN): a fresh run
// never clobbers an earlier one, two runs never share a run folder, --resume auto never starts
// fresh over damaged checkpoints unless asked, nor resumes a checkpoint that lies about its step or
// came from another architecture; a run already past total_steps, and a CUDA device on a CPU-only
// build, say so plainly.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "loom/hash.h"
#include "loom/sys.h"
#include "loop_fixture.h"
#include "run_dir.h"
#include "test_util.h"

namespace {

using loom::test::quote;
using loom::test::read_all;
using loom::test::TempDir;
using loom::test::write_all;

loom::test::RunResult train(const std::vector<std::string>& args) {
  std::string s = "timeout -s KILL 120 " + quote(LOOM_TRAIN_BIN);
  for (const auto& a : args) s += " " + quote(a);
  return loom::test::run(s + " 2>&1");
}

std::vector<std::string> args(const TempDir& dir, const std::string& run, std::vector<std::string> extra = {}) {
  return loom::test::loop_args(dir / "data", dir / run, std::move(extra));
}

// Rewrites one file of a checkpoint and its manifest entry, so the checkpoint still validates.
void rewrite_signed(const std::string& ckpt, const std::string& name, const std::string& text) {
  const std::string before = read_all(ckpt + "/" + name);
  write_all(ckpt + "/" + name, text);
  std::string man = read_all(ckpt + "/manifest.json");
  const std::string entry = "{\"name\": \"" + name + "\", \"bytes\": ";
  const size_t at = man.find(entry);
  REQUIRE(at != std::string::npos);
  const size_t end = man.find('}', at);
  man.replace(at, end - at, entry + std::to_string(text.size()) + ", \"xxh64\": \"" +
                                loom::hex64(loom::xxh64(text.data(), text.size())) + "\"");
  write_all(ckpt + "/manifest.json", man);
  (void)before;
}

void flip_last_byte(const std::string& path) {
  std::string w = read_all(path);
  w[w.size() - 1] ^= 1;
  write_all(path, w);
}

}  // namespace

TEST_CASE("loom-train: a fresh run into a run_dir with an earlier run is refused and job.overwrite moves it aside",
          "[safety]") {
  TempDir dir("safety_fresh_e2e");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(args(dir, "r", {"--data.total_steps=2"})).exit_code == 0);
  const std::string weights = read_all(dir / "r/checkpoints/step_2/model.safetensors");

  auto again = train(args(dir, "r", {"--data.total_steps=2"}));
  INFO(again.output);
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.output, Catch::Contains("job.run_dir " + (dir / "r")) && Catch::Contains("--resume auto") &&
                               Catch::Contains("another job.run_dir"));
  CHECK(read_all(dir / "r/checkpoints/step_2/model.safetensors") == weights);

  auto over = train(args(dir, "r", {"--data.total_steps=2", "--job.overwrite=true"}));
  INFO(over.output);
  REQUIRE(over.exit_code == 0);
  std::string aside;
  for (const std::string& f : loom::sys::list_files(dir.path()))
    if (f.find("/r.old-") != std::string::npos && loom::sys::basename(f) == "metrics.jsonl") aside = loom::sys::dirname(f);
  REQUIRE_FALSE(aside.empty());
  CHECK(read_all(aside + "/checkpoints/step_2/model.safetensors") == weights);
  CHECK(loom::sys::exists(dir / "r/checkpoints/step_2/manifest.json"));
}

TEST_CASE("loom-train: a second run into a locked run_dir is refused naming the holder's host and pid", "[safety]") {
  TempDir dir("safety_lock_e2e");
  loom::test::write_loop_data(dir / "data");
  {
    // This process takes the lock through loom-train's own code path, then launches the second run.
    loom::RunDirLock holder(dir / "r");
    auto second = train(args(dir, "r", {"--data.total_steps=1"}));
    INFO(second.output);
    CHECK(second.exit_code == 1);
    CHECK_THAT(second.output, Catch::Contains("host " + loom::sys::hostname() + " pid " + std::to_string(::getpid())));
    CHECK_FALSE(loom::sys::exists(dir / "r/metrics.jsonl"));
    CHECK_FALSE(loom::sys::exists(dir / "r/checkpoints"));
  }
  auto after = train(args(dir, "r", {"--data.total_steps=1"}));
  INFO(after.output);
  CHECK(after.exit_code == 0);
}

TEST_CASE("loom-train --resume auto with every checkpoint damaged stops listing each and auto-or-fresh starts fresh",
          "[safety]") {
  TempDir dir("safety_damaged_e2e");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(args(dir, "r", {"--data.total_steps=4", "--ckpt.checkpoint_every=2", "--ckpt.keep=0"})).exit_code == 0);
  flip_last_byte(dir / "r/checkpoints/step_2/model.safetensors");
  loom::sys::remove_file(dir / "r/checkpoints/step_4/manifest.json");
  const std::string damaged = read_all(dir / "r/checkpoints/step_2/model.safetensors");

  auto r = train(args(dir, "r", {"--data.total_steps=4", "--resume=auto"}));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("step_4: ") && Catch::Contains("no manifest.json") &&
                           Catch::Contains("step_2: ") && Catch::Contains("(the file is corrupt)") &&
                           Catch::Contains("--resume auto-or-fresh"));
  CHECK(read_all(dir / "r/checkpoints/step_2/model.safetensors") == damaged);

  auto fresh = train(args(dir, "r", {"--data.total_steps=4", "--resume=auto-or-fresh"}));
  INFO(fresh.output);
  CHECK(fresh.exit_code == 0);
  CHECK_THAT(fresh.output, Catch::Contains("starting fresh"));
  CHECK(loom::validate_checkpoint(dir / "r/checkpoints/step_4") == 4);
}

TEST_CASE("loom-train --resume auto walks past a checkpoint whose state.json step disagrees with its folder",
          "[safety]") {
  TempDir dir("safety_state_e2e");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(args(dir, "r", {"--data.total_steps=4", "--ckpt.checkpoint_every=2", "--ckpt.keep=0"})).exit_code == 0);
  const std::string ck = dir / "r/checkpoints/step_4";
  std::string state = read_all(ck + "/state.json");
  const size_t at = state.find("\"step\": 4");
  REQUIRE(at != std::string::npos);
  state.replace(at, 9, "\"step\": 7");
  rewrite_signed(ck, "state.json", state);
  REQUIRE(loom::validate_checkpoint(ck) == 4);  // the manifest alone cannot tell

  auto explicit_dir = train(args(dir, "r", {"--data.total_steps=4", "--resume=" + ck}));
  INFO(explicit_dir.output);
  CHECK(explicit_dir.exit_code == 1);
  CHECK_THAT(explicit_dir.output, Catch::Contains("state.json: step 7"));
  auto r = train(args(dir, "r", {"--data.total_steps=4", "--resume=auto"}));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("state.json: step 7, but the checkpoint (folder and manifest) is step 4") &&
                           Catch::Contains("resumed from " + (dir / "r/checkpoints/step_2") + ": step 2"));
}

TEST_CASE("loom-train: resuming with another architecture of equal shapes is refused but --init-from is not",
          "[safety]") {
  TempDir dir("safety_arch_e2e");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(args(dir, "r", {"--data.total_steps=2"})).exit_code == 0);
  const std::vector<std::string> other = {"--data.total_steps=4", "--model.num_attention_heads=8",
                                          "--model.rope_base=500"};
  auto with = [&](std::vector<std::string> a, const std::string& extra) {
    a.push_back(extra);
    return a;
  };
  auto r = train(args(dir, "r", with(other, "--resume=auto")));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("model.num_attention_heads: 4 -> 8") &&
                           Catch::Contains("model.rope_base: 10000 -> 500") && Catch::Contains("--init-from"));
  auto init = train(args(dir, "s", with(other, "--init-from=" + (dir / "r/checkpoints/step_2"))));
  INFO(init.output);
  CHECK(init.exit_code == 0);
  // Memory-only keys may change on resume.
  auto mem = train(args(dir, "r", {"--data.total_steps=4", "--model.checkpoint=1", "--resume=auto",
                                   "--lr_scheduler.on_resume=apply"}));
  INFO(mem.output);
  CHECK(mem.exit_code == 0);
}

TEST_CASE("loom-train: resuming past data.total_steps says so and exits 0 without a loss", "[safety]") {
  TempDir dir("safety_past_e2e");
  loom::test::write_loop_data(dir / "data");
  REQUIRE(train(args(dir, "r", {"--data.total_steps=4"})).exit_code == 0);
  auto r = train(args(dir, "r", {"--data.total_steps=2", "--resume=auto"}));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("already past data.total_steps") && Catch::Contains("step 4"));
  CHECK_THAT(r.output, !Catch::Contains("last loss"));
  CHECK(loom::validate_checkpoint(dir / "r/checkpoints/step_4") == 4);
}

TEST_CASE("loom-train --job.device=cuda on a build or host without CUDA is a clear error", "[safety]") {
  if (torch::cuda::is_available()) {
    WARN("a CUDA device is present: nothing to test here");
    return;
  }
  TempDir dir("safety_cuda_e2e");
  loom::test::write_loop_data(dir / "data");
  auto r = train(args(dir, "r", {"--data.total_steps=1", "--job.device=cuda"}));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("job.device=cuda") && Catch::Contains("CUDA"));
  CHECK_THAT(r.output, !Catch::Contains("LibTorch:") && !Catch::Contains("dispatch"));
}

TEST_CASE("loom-train refuses a packed shard whose .bin has one byte flipped unless data.verify_checksums=false",
          "[safety]") {
  TempDir dir("safety_checksum_e2e");
  loom::test::write_loop_data(dir / "data");
  const std::string bin = dir / "data/train/beta/part0.bin";
  std::string bytes = read_all(bin);
  const std::string want = loom::hex64(loom::xxh64(bytes.data(), bytes.size()));
  // Token 21 (pack 1, position 5), low byte: vocab 48 is even, so the id stays valid and only the
  // checksum can tell. Same size, so the header and index checks pass.
  bytes[2 * 21] ^= 1;
  write_all(bin, bytes);
  const std::string got = loom::hex64(loom::xxh64(bytes.data(), bytes.size()));
  REQUIRE(got != want);

  auto r = train(args(dir, "r", {"--data.total_steps=2"}));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains(bin + ": checksum mismatch: xxh64 of the .bin is " + got + ", the .meta says " +
                                       want) &&
                           Catch::Contains("data.verify_checksums=false"));
  CHECK_FALSE(loom::sys::exists(dir / "r/checkpoints/step_2"));

  auto skip = train(args(dir, "s", {"--data.total_steps=2", "--data.verify_checksums=false"}));
  INFO(skip.output);
  CHECK(skip.exit_code == 0);
  CHECK(loom::validate_checkpoint(dir / "s/checkpoints/step_2") == 2);
}
