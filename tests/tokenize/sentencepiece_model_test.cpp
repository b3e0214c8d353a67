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

// The one tokenizer-model check (spm::read_spm_model_bytes) seen through both loaders: libsentencepiece's
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

// A model's first byte is 0x0A ('\n'), the second its first piece's length: 123 is '{'. Such a
// model (a first piece record padded with an unknown field to 123 bytes) is a model, not JSON.
TEST_CASE("tokenizer model: a model whose first piece record is 123 bytes long is not taken for JSON") {
  TempDir dir("spm_brace");
  const std::string model = read_all(corpus("spm_test_unigram_1k.model"));
  REQUIRE(model.compare(0, 11, std::string("\n\t\n\x05<unk>\x18\x02", 11)) == 0);
  const std::string inner = model.substr(2, 9) + "\x9a\x06" + std::string(1, '\x6f') + std::string(111, 'x');
  REQUIRE(inner.size() == 123);
  write_all(dir / "brace.model", "\n{" + inner + model.substr(11));
  CHECK_NOTHROW(spm::read_spm_model_bytes(dir / "brace.model"));
  CHECK(spm::read_spm_model(dir / "brace.model").pieces == spm::read_spm_model(corpus("spm_test_unigram_1k.model")).pieces);
  std::vector<uint32_t> a, b;
  SentencePieceModel(dir / "brace.model", EncoderChoice::kSentencePiece).encode("I am a cat.", a);
  SentencePieceModel(corpus("spm_test_unigram_1k.model"), EncoderChoice::kSentencePiece).encode("I am a cat.", b);
  CHECK(a == b);
  CHECK_FALSE(a.empty());
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

namespace {

// Protobuf wire bytes, to append fields to a .model (a repeated field gains an element, a message
// field that occurs again merges into the first, its scalars winning).
std::string varint(uint64_t v) {
  std::string s;
  for (; v >= 0x80; v >>= 7) s += static_cast<char>((v & 0x7f) | 0x80);
  return s + static_cast<char>(v);
}
std::string field_bytes(int field, const std::string& payload) {
  return varint(static_cast<uint64_t>(field) << 3 | 2) + varint(payload.size()) + payload;
}
std::string field_varint(int field, uint64_t v) { return varint(static_cast<uint64_t>(field) << 3) + varint(v); }
// ModelProto.pieces += {piece, score 0, type}
std::string piece_field(const std::string& piece, int type) {
  return field_bytes(1, field_bytes(1, piece) + std::string("\x15\0\0\0\0", 5) + field_varint(3, type));
}
std::string trainer_field(const std::string& payload) { return field_bytes(2, payload); }

}  // namespace

TEST_CASE("SentencePieceModel: libsentencepiece is loaded only to decode, the header ids are those of libsentencepiece") {
  TempDir dir("spm");
  const std::string internlm = read_all(internlm_model());
  // bos_id()/eos_id() of libsentencepiece are the ids of the trainer's bos/eos pieces when those are
  // control pieces, whatever the trainer's bos_id/eos_id fields say (values from python3-sentencepiece).
  struct Case {
    std::string name, bytes;
    int32_t bos, eos;
  };
  const std::vector<Case> cases = {
      {"internlm", internlm, 1, 2},
      {"bos_piece </s>", internlm + trainer_field(field_bytes(46, "</s>")), 2, 2},
      {"bos_piece a (normal)", internlm + trainer_field(field_bytes(46, "a")), -1, 2},
      {"bos_piece <unk>", internlm + trainer_field(field_bytes(46, "<unk>")), -1, 2},
      {"bos_piece absent", internlm + trainer_field(field_bytes(46, "zzzz")), -1, 2},
      {"bos_piece empty (the default)", internlm + trainer_field(field_bytes(46, "")), 1, 2},
      {"eos_piece <s>", internlm + trainer_field(field_bytes(47, "<s>")), 1, 1},
      {"bos_id field 5", internlm + trainer_field(field_varint(41, 5)), 1, 2},
      {"unigram 1k", read_all(corpus("spm_test_unigram_1k.model")), 1, 2},
      {"demo 2k", read_all(sample("spm_2k.model")), 1, 2},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    write_all(dir / "m.model", c.bytes);
    const SentencePieceModel lazy(dir / "m.model", EncoderChoice::kAuto);
    const SentencePieceModel sp(dir / "m.model", EncoderChoice::kSentencePiece);
    CHECK(lazy.encoder_name() == std::string("loom"));
    CHECK(!lazy.sentencepiece_loaded());
    CHECK(sp.sentencepiece_loaded());
    CHECK(lazy.vocab_size() == sp.vocab_size());
    CHECK(lazy.bos_id() == sp.bos_id());
    CHECK(lazy.eos_id() == sp.eos_id());
    CHECK(lazy.bos_id() == c.bos);
    CHECK(lazy.eos_id() == c.eos);
    CHECK(lazy.fingerprint() == sp.fingerprint());
    std::vector<uint32_t> a, b;
    lazy.encode("Hello, world.", a);
    lazy.encode_continuation("fox", a);
    sp.encode("Hello, world.", b);
    sp.encode_continuation("fox", b);
    CHECK(a == b);
    CHECK(!lazy.sentencepiece_loaded());
    CHECK(lazy.decode(a) == sp.decode(b));
    CHECK(lazy.sentencepiece_loaded());
  }
}

TEST_CASE("SentencePieceModel: a vocabulary libsentencepiece refuses is refused with its words, not encoded by loom") {
  TempDir dir("spm");
  const std::string internlm = read_all(internlm_model()), unigram = read_all(corpus("spm_test_unigram_1k.model"));
  struct Case {
    std::string name, bytes, sp_says;
  };
  const std::vector<Case> cases = {
      {"repeated piece", internlm + piece_field("a", 1), "a is already defined"},
      {"empty piece", internlm + piece_field("", 1), "piece must not be empty"},
      {"second unknown piece", internlm + piece_field("<unk2>", 2), "unk is already defined"},
      {"byte piece without byte_fallback", unigram + piece_field("<0x41>", 6), "is found although `byte_fallback` is false"},
      {"invalid byte piece", internlm + piece_field("<0x4g>", 6), "byte piece <0x4g> is invalid"},
      {"byte_fallback without byte pieces", unigram + trainer_field(field_varint(35, 1)),
       "there are not 256 byte pieces although `byte_fallback` is true"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    write_all(dir / "m.model", c.bytes);
    CHECK_THROWS_WITH(SentencePieceModel(dir / "m.model", EncoderChoice::kAuto),
                      Catch::StartsWith(dir / "m.model: not a SentencePiece model: ") && Catch::Contains(c.sp_says));
    CHECK_THROWS_WITH(SentencePieceModel(dir / "m.model", EncoderChoice::kLoom),
                      Catch::StartsWith(dir / "m.model: loom's encoder cannot encode this model: "));
  }
}

TEST_CASE("SentencePieceModel: a model with self-test samples is checked by libsentencepiece at load") {
  TempDir dir("spm");
  const std::string internlm = read_all(internlm_model());
  // ModelProto.self_test_data (4) { samples (1) { input (1), expected (2): the pieces, space separated } }
  const auto self_test = [](const std::string& input, const std::string& expected) {
    return field_bytes(4, field_bytes(1, field_bytes(1, input) + field_bytes(2, expected)));
  };
  write_all(dir / "good.model", internlm + self_test("Hello world", "Hello \xe2\x96\x81world"));
  const SentencePieceModel good(dir / "good.model", EncoderChoice::kAuto);
  CHECK(good.encoder_name() == std::string("loom"));
  CHECK(good.sentencepiece_loaded());
  CHECK(good.bos_id() == 1);
  write_all(dir / "bad.model", internlm + self_test("Hello world", "Hel lo"));
  CHECK_THROWS_WITH(SentencePieceModel(dir / "bad.model", EncoderChoice::kAuto),
                    Catch::StartsWith(dir / "bad.model: not a SentencePiece model: ") && Catch::Contains("Self-test"));
}

TEST_CASE("SentencePieceModel: libsentencepiece loaded late refuses a model file changed since the start") {
  TempDir dir("spm");
  write_all(dir / "m.model", read_all(internlm_model()));
  const SentencePieceModel m(dir / "m.model", EncoderChoice::kAuto);
  CHECK(!m.sentencepiece_loaded());
  write_all(dir / "m.model", read_all(corpus("spm_test_unigram_1k.model")));
  CHECK_THROWS_WITH(m.decode({1000, 1001}), Catch::StartsWith(dir / "m.model: the model file changed while it was in use"));
  write_all(dir / "m.model", read_all(internlm_model()));
  CHECK(m.decode({68305}) == SentencePieceModel(internlm_model(), EncoderChoice::kSentencePiece).decode({68305}));
}
