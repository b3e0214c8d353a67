// The hang watchdog leaves start-up alone: with monitor.hang_timeout far shorter than the data
// index's checksum pass, loom-train still indexes its data, builds the model and reaches the steps
// (where a planted hang is then caught). Data: 4 packed shards of 64 MiB, verified at start.
#include <catch2/catch.hpp>

#include "loom/packed_format.h"
#include "loom/sys.h"
#include "loop_fixture.h"
#include "test_util.h"

namespace {

using loom::test::quote;
using loom::test::TempDir;

constexpr uint32_t kSeqLen = 2048;

// packs of kSeqLen tokens, one document each, ids < kLoopVocab: 64 MiB of .bin per shard.
void write_big_shard(const std::string& bin, uint64_t seed) {
  loom::TokenizerInfo info;
  info.vocab_size = loom::test::kLoopVocab;
  info.bos_id = 1;
  info.eos_id = 2;
  loom::PackedWriter w(bin, info, kSeqLen, loom::PackStrategy::kConcat, seed);
  std::vector<uint32_t> tokens(kSeqLen);
  const uint64_t packs = (uint64_t{64} << 20) / (kSeqLen * 2);
  for (uint64_t p = 0; p < packs; ++p) {
    for (uint32_t i = 0; i < kSeqLen; ++i) tokens[i] = static_cast<uint32_t>((p * 7 + i * 5 + seed) % info.vocab_size);
    w.add_pack(tokens, {loom::PackedSegment{p, 0, kSeqLen, 0, loom::kSegEndsDoc}});
  }
  w.commit(packs);
}

}  // namespace

TEST_CASE("start-up, the data index's checksums included, runs under the start-up rule, not hang_timeout",
          "[fault][startup]") {
  TempDir dir("startup_watchdog");
  loom::sys::make_dirs(dir / "data/train");
  for (uint64_t s = 0; s < 4; ++s) write_big_shard(dir / ("data/train/part" + std::to_string(s) + ".bin"), s);
  std::string cmd = "timeout -s KILL 120 " + quote(LOOM_TRAIN_BIN);
  const auto args = loom::test::loop_args(
      dir / "data", dir / "run",
      {"--data.valid_folder=", "--data.seq_len=2048", "--data.micro_bsz=1", "--data.micro_num=1",
       "--monitor.startup_probe=false", "--ckpt.enable_save_ckpt=false", "--debug.hang_at_step=0",
       "--monitor.hang_timeout=0.001"});
  for (const auto& a : args) cmd += " " + quote(a);
  const auto r = loom::test::run(cmd + " 2>&1");
  INFO(r.output);
  // The checksum pass (hundreds of times hang_timeout) and every start-up phase passed: the model
  // was built. Then the planted hang in step 0 is caught as before.
  CHECK(r.output.find("data: checksums of 4 shards") != std::string::npos);
  const size_t model = r.output.find("model: "), hang = r.output.find("hang detected");
  REQUIRE(model != std::string::npos);
  REQUIRE(hang != std::string::npos);
  CHECK(model < hang);
  CHECK(r.exit_code == 4);
  CHECK(r.output.find("phase 'start-up'") == std::string::npos);
}
