// loom::SentencePieceModel, the one libsentencepiece loader (spm/): header fields, encode, decode and
// its errors, on internlm_v7.model (vocab 103168, bos 1, eos 2) with Python's sentencepiece as reference.
#include <catch2/catch.hpp>

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/spm/sentencepiece_model.h"
#include "loom/spm_model.h"
#include "tok_test_util.h"

using namespace loom;
using namespace loom::test;

TEST_CASE("SentencePieceModel: header fields, info flags, encode as python sentencepiece, decode back") {
  const SentencePieceModel m(internlm_model());
  CHECK(m.path() == internlm_model());
  CHECK(m.vocab_size() == 103168);
  CHECK(m.bos_id() == 1);
  CHECK(m.eos_id() == 2);
  CHECK(m.fingerprint() == xxh64_file(internlm_model()));
  const TokenizerInfo both = m.info(true, true), none = m.info(false, false);
  CHECK(both.flags == (kShardFlagBos | kShardFlagEos));
  CHECK(none.flags == 0);
  CHECK(none.vocab_size == 103168);
  CHECK(none.bos_id == 1);
  CHECK(none.eos_id == 2);
  CHECK(none.model_fingerprint == m.fingerprint());

  TempDir dir("spm");
  const std::string text = "Hello, world: a SentencePiece round trip.";
  auto py = python_code(dir, "import sentencepiece as spm\nsp = spm.SentencePieceProcessor(model_file=" +
                                 quote(internlm_model()) + ")\nprint(' '.join(map(str, sp.encode(" + quote(text) + "))))\n");
  REQUIRE(py.exit_code == 0);
  std::vector<uint32_t> ids = {7};  // encode appends
  m.encode(text, ids);
  std::string got = "7";
  for (size_t i = 1; i < ids.size(); ++i) got += " " + std::to_string(ids[i]);
  CHECK(got + "\n" == "7 " + py.output);
  CHECK(m.decode({ids.begin() + 1, ids.end()}) == text);
  CHECK_THROWS_WITH(m.decode({5, 103168}), Catch::StartsWith("token id 103168 >= the model's vocab size 103168; is "
                                                               "this the model the shard was made with?"));
}

TEST_CASE("SentencePieceModel: a missing file and a file that is not a model are clean errors") {
  TempDir dir("spm");
  CHECK_THROWS_AS(SentencePieceModel(dir / "none.model"), Error);
  CHECK_THROWS_WITH(SentencePieceModel(dir / "none.model"),
                    Catch::StartsWith(dir / "none.model: no such SentencePiece model file"));
  write_all(dir / "t.model", "not a model\n");
  CHECK_THROWS_WITH(SentencePieceModel(dir / "t.model"), Catch::StartsWith(dir / "t.model: not a SentencePiece model: "));
}

// The one tokenizer-model check (spm::check_spm_model_file) seen through both loaders: libsentencepiece's
// (loom-tokenize, loom-pack) and loom's own reader (loom-train). Each mode's message names the path,
// what it is, and what loom reads instead.
namespace {
const std::string kExpected = "loom reads a SentencePiece .model file (in a Hugging Face folder it is tokenizer.model)";

void check_refused(const std::string& path, const std::string& message) {
  CHECK_THROWS_WITH(SentencePieceModel(path), message);
  CHECK_THROWS_WITH(SentencePieceModel(path, EncoderChoice::kSentencePiece), message);
  CHECK_THROWS_WITH(spm::read_spm_model(path), message);
}
}  // namespace

TEST_CASE("tokenizer model: a folder is refused, naming its tokenizer.model when it has one") {
  TempDir dir("spm_dir");
  run("mkdir -p " + quote(dir / "hf") + " " + quote(dir / "empty"));
  write_all(dir / "hf/tokenizer.json", "{\"version\": \"1.0\"}\n");
  write_all(dir / "hf/tokenizer.model", read_all(internlm_model()));
  check_refused(dir / "hf", dir / "hf: a folder, not a tokenizer model file; " + kExpected + ": give " + dir / "hf/tokenizer.model");
  check_refused(dir / "hf/", dir / "hf/: a folder, not a tokenizer model file; " + kExpected + ": give " + dir / "hf/tokenizer.model");
  check_refused(dir / "empty", dir / "empty: a folder, not a tokenizer model file; " + kExpected + " and this folder has none");
}

TEST_CASE("tokenizer model: a Hugging Face tokenizer.json is refused as JSON") {
  TempDir dir("spm_json");
  write_all(dir / "tokenizer.json", "\n  {\"version\": \"1.0\", \"truncation\": null, \"model\": {\"type\": \"BPE\"}}\n");
  check_refused(dir / "tokenizer.json", dir / "tokenizer.json: a JSON file (a Hugging Face tokenizer.json or "
                                               "tokenizer_config.json?), not a SentencePiece model; " + kExpected);
}

TEST_CASE("tokenizer model: an empty file is refused as empty") {
  TempDir dir("spm_empty");
  write_all(dir / "tokenizer.model", "");
  check_refused(dir / "tokenizer.model", dir / "tokenizer.model: an empty file, not a tokenizer model; " + kExpected);
  check_refused(dir / "missing.model", dir / "missing.model: no such SentencePiece model file; " + kExpected);
}

TEST_CASE("tokenizer model: random bytes are refused by both parsers, naming the file and what loom reads") {
  TempDir dir("spm_random");
  std::string bytes(4096, '\0');
  uint64_t x = 12345;
  for (char& c : bytes) c = static_cast<char>((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
  write_all(dir / "random.model", bytes);
  const std::string path = dir / "random.model";
  CHECK_THROWS_WITH(SentencePieceModel(path), Catch::StartsWith(path + ": not a SentencePiece model: ") &&
                                                  Catch::EndsWith("; " + kExpected));
  CHECK_THROWS_WITH(spm::read_spm_model(path), Catch::StartsWith(path + ": ") &&
                                                   Catch::EndsWith("; not a SentencePiece model; " + kExpected));
}

TEST_CASE("encode_continuation: no dummy prefix after a cut, the same ids from both encoders") {
  const std::string cjk = "\xe5\x90\xbe\xe8\xbc\xa9\xe3\x81\xaf\xe7\x8c\xab\xe3\x81\xa7\xe3\x81\x82\xe3\x82\x8b";
  for (const std::string& model : {internlm_model(), sample("spm_2k.model")}) {
    INFO(model);
    const SentencePieceModel loom_enc(model, EncoderChoice::kLoom), spm_enc(model, EncoderChoice::kSentencePiece);
    for (const std::string& text : {std::string("quickbrownfox"), std::string("31415926"), cjk, std::string(" fox"),
                                   std::string("\nfox")}) {
      INFO(text);
      std::vector<uint32_t> a, b, whole_ids;
      loom_enc.encode_continuation(text, a);
      spm_enc.encode_continuation(text, b);
      CHECK(a == b);
      // Glued after a first piece, the ids decode as the whole text's do: no space gained at the
      // cut, and a leading whitespace the model drops still shows as the prefix that stands for it.
      std::vector<uint32_t> whole;
      loom_enc.encode("ab" + text, whole);
      loom_enc.encode("ab", whole_ids);
      loom_enc.encode_continuation(text, whole_ids);
      CHECK(loom_enc.decode(whole_ids) == loom_enc.decode(whole));
      // Without whitespace, a piece decodes to itself.
      if (text[0] != ' ' && text[0] != '\n') CHECK(loom_enc.decode(a) == text);
    }
  }
}
