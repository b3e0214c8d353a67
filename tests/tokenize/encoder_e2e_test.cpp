// loom-tokenize --encoder: loom's own encoder and libsentencepiece write the same shards, byte for
// byte but for the header fields that name the encoder, on every model and corpus the repository
// has; auto takes loom's and falls back to libsentencepiece for a model loom's cannot encode.
#include <catch2/catch.hpp>

#include <cstring>

#include "loom/shard_format.h"
#include "tok_test_util.h"

using namespace loom::test;
using Catch::Matchers::Contains;

namespace {

std::string q(const std::string& s) { return quote(s); }

uint32_t encoder_field(const std::string& meta) {
  REQUIRE(meta.size() >= sizeof(loom::ShardHeader));
  loom::ShardHeader h;
  std::memcpy(&h, meta.data(), sizeof h);
  return h.encoder;
}

// The .meta with the fields that name the encoder zeroed (encoder, and settings_xxh64, whose
// settings include it): what must be equal between encoders.
std::string without_encoder(std::string meta) {
  std::memset(&meta[offsetof(loom::ShardHeader, encoder)], 0, sizeof(uint32_t));
  std::memset(&meta[offsetof(loom::ShardHeader, settings_xxh64)], 0, sizeof(uint64_t));
  return meta;
}

}  // namespace

TEST_CASE("encoders loom and sentencepiece write the same shards for every model and corpus", "[tokenize][e2e]") {
  static_assert(offsetof(loom::ShardHeader, encoder) == 80, "docs/FORMAT.md puts the encoder at byte 80");
  const std::vector<std::string> models = {internlm_model(), corpus("spm_test_unigram_1k.model"), sample("spm_2k.model")};
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {corpus("botchan.txt"), "botchan"},           {corpus("wagahaiwa_nekodearu.txt"), "wagahaiwa_nekodearu"},
      {sample("botchan_head.txt"), "botchan_head"}, {sample("botchan_tail.json"), "botchan_tail"},
      {sample("neko_head.jsonl.gz"), "neko_head"}};
  std::string files;
  for (const auto& [path, name] : inputs) files += " " + q(path);
  TempDir dir("tok_e2e_encoder");
  for (size_t m = 0; m < models.size(); ++m) {
    for (const std::string format : {"loom", "internlm"}) {
      const std::string base = dir / (std::to_string(m) + format);
      for (const std::string enc : {"loom", "sentencepiece"}) {
        const RunResult r = tokenize("--model " + q(models[m]) + " --format " + format + " --encoder " + enc +
                                     " --threads 2 --output-dir " + q(base + enc) + files + " 2>&1");
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        CHECK_THAT(r.output, Contains("encoder: " + enc));
      }
      for (const auto& [path, name] : inputs) {
        INFO(models[m] << " --format " << format << ": " << name);
        const std::string a = base + "loom/" + name + ".bin", b = base + "sentencepiece/" + name + ".bin";
        CHECK(read_all(a) == read_all(b));
        const std::string meta_a = read_all(a + ".meta"), meta_b = read_all(b + ".meta");
        if (format == "internlm") {
          CHECK(meta_a == meta_b);
          CHECK(read_all(a + ".loom-settings") != read_all(b + ".loom-settings"));
        } else {
          CHECK(without_encoder(meta_a) == without_encoder(meta_b));
          CHECK(encoder_field(meta_a) == loom::kShardEncoderLoom);
          CHECK(encoder_field(meta_b) == loom::kShardEncoderSentencePiece);
          loom::ShardReader(a).verify_deep();
        }
      }
    }
  }
}

TEST_CASE("encoder auto takes loom's encoder, and libsentencepiece for a model loom's cannot encode", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_encoder_auto");
  const RunResult a = tokenize("--model " + q(internlm_model()) + " --output-dir " + q(dir / "auto") + " " +
                               q(sample("botchan_head.txt")) + " 2>&1");
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  // The start prints only what differs from the defaults (encoder = auto is one), then what the
  // documents get, once (no "bos = false" beside "bos = on").
  CHECK_THAT(a.output, !Contains("encoder = auto") && Contains("documents get: BOS yes, EOS yes; 1 input\n") &&
                           !Contains("bos = "));
  CHECK_THAT(a.output, Contains("INFO encoder: loom\n"));
  CHECK(encoder_field(read_all(dir / "auto/botchan_head.bin.meta")) == loom::kShardEncoderLoom);

  // A char model: loom's encoder does unigram and BPE only.
  const RunResult t = tokenize("train-spm --vocab-size 300 --model-type char --character-coverage 1 --threads 2 "
                               "--model-prefix " + q(dir / "char") + " " + q(sample("botchan_head.txt")) + " 2>&1");
  INFO(t.output);
  REQUIRE(t.exit_code == 0);
  // SentencePiece's own output goes to PREFIX.train.log, not the terminal.
  CHECK_THAT(t.output, !Contains("trainer_interface") && !Contains("unigram_model_trainer") && Contains("char.train.log"));
  CHECK_THAT(read_all(dir / "char.train.log"), Contains("trainer_interface"));
  const RunResult f = tokenize("--model " + q(dir / "char.model") + " --output-dir " + q(dir / "char") + " " +
                               q(sample("botchan_head.txt")) + " 2>&1");
  INFO(f.output);
  REQUIRE(f.exit_code == 0);
  CHECK_THAT(f.output, Contains("encoder: sentencepiece (loom's encoder cannot: SentencePiece model type 4"));
  CHECK(encoder_field(read_all(dir / "char/botchan_head.bin.meta")) == loom::kShardEncoderSentencePiece);
  const RunResult l = tokenize("--model " + q(dir / "char.model") + " --encoder loom --output-dir " + q(dir / "loom") +
                               " " + q(sample("botchan_head.txt")) + " 2>&1");
  CHECK(l.exit_code == 1);
  CHECK_THAT(l.output, Contains("loom's encoder cannot encode this model"));
  const RunResult u = tokenize("--model " + q(internlm_model()) + " --encoder fast --output-dir " + q(dir / "x") + " " +
                               q(sample("botchan_head.txt")) + " 2>&1");
  CHECK(u.exit_code == 2);
  CHECK_THAT(u.output, Contains("--encoder: 'fast' is not one of auto, loom, sentencepiece"));
}
