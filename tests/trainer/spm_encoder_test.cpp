// loom's SentencePiece encoder (loom/spm_encoder.h) against Python sentencepiece: every line of
// two real corpora (English, and Japanese with many characters no 1k/2k vocab has) and edge cases,
// with the three models loom meets (InternLM's BPE with byte fallback and user-defined pieces, an
// NFKC unigram without byte fallback, the demo's identity unigram with byte fallback). The golden
// ids are computed at test time by tests/trainer/spm_golden.py with Debian's python3-sentencepiece.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hf_tokenizer.h"
#include "loom/error.h"
#include "loom/spm_encoder.h"
#include "test_util.h"

using namespace loom;
using Catch::Matchers::Contains;

namespace {

std::string corpus(const std::string& name) { return test::test_data_dir() + "/" + name; }

std::vector<std::string> spm_models() {
  return {corpus("internlm_v7.model"), corpus("spm_test_unigram_1k.model"),
          test::source_dir() + "/data_samples/spm_2k.model"};
}

// Texts separated by '\n' as spm_golden.py splits them (a final '\n' ends the last one).
std::vector<std::string> split_texts(const std::string& data) {
  std::vector<std::string> texts;
  size_t at = 0;
  while (at < data.size()) {
    const size_t nl = data.find('\n', at);
    if (nl == std::string::npos) {
      texts.push_back(data.substr(at));
      break;
    }
    texts.push_back(data.substr(at, nl - at));
    at = nl + 1;
  }
  return texts;
}

std::vector<std::vector<int64_t>> golden_ids(const std::string& model, const std::string& input,
                                             const test::TempDir& dir) {
  const std::string out = dir / "golden.txt";
  const test::RunResult r = test::run(test::quote(test::python()) + " " +
                                      test::quote(test::source_dir() + "/tests/trainer/spm_golden.py") + " " +
                                      test::quote(model) + " " + test::quote(input) + " " + test::quote(out));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<std::vector<int64_t>> ids;
  for (const std::string& line : split_texts(test::read_all(out))) {
    std::istringstream is(line);
    std::vector<int64_t> v;
    for (int64_t id; is >> id;) v.push_back(id);
    ids.push_back(v);
  }
  return ids;
}

std::string join(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// Every text encoded by loom equals Python's ids; returns how many lines matched (all, or it fails).
size_t check_texts(const spm::SpmEncoder& enc, const std::string& model, const std::vector<std::string>& texts,
                   const std::string& input_file, const test::TempDir& dir) {
  const auto golden = golden_ids(model, input_file, dir);
  REQUIRE(golden.size() == texts.size());
  size_t equal = 0, shown = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int64_t> got = enc.encode(texts[i]);
    if (got == golden[i]) {
      ++equal;
    } else if (shown++ < 3) {
      FAIL_CHECK(model << " text " << i << " '" << texts[i] << "'\n  normalized '" << enc.normalize(texts[i])
                       << "'\n  loom   " << join(got) << "\n  python " << join(golden[i]));
    }
  }
  INFO(model << ": " << equal << " of " << texts.size() << " texts equal");
  CHECK(equal == texts.size());
  return equal;
}

}  // namespace

TEST_CASE("spm reader gets the fields encoding needs from the three models", "[spm]") {
  const spm::SpmModel internlm = spm::read_spm_model(corpus("internlm_v7.model"));
  CHECK(internlm.size() == 103168);
  CHECK(internlm.model_type == spm::kSpmBpe);
  CHECK(internlm.byte_fallback);
  CHECK_FALSE(internlm.treat_whitespace_as_suffix);
  CHECK(internlm.normalizer.name == "identity");
  CHECK(internlm.normalizer.precompiled_charsmap.empty());
  CHECK_FALSE(internlm.normalizer.add_dummy_prefix);
  CHECK_FALSE(internlm.normalizer.remove_extra_whitespaces);
  CHECK(internlm.normalizer.escape_whitespaces);
  CHECK(internlm.types[103027] == spm::kSpmUserDefined);
  CHECK(internlm.pieces[103027] == "<eoh>");

  const spm::SpmModel nfkc = spm::read_spm_model(corpus("spm_test_unigram_1k.model"));
  CHECK(nfkc.model_type == spm::kSpmUnigram);
  CHECK_FALSE(nfkc.byte_fallback);
  CHECK(nfkc.normalizer.name == "nfkc");
  CHECK(nfkc.normalizer.precompiled_charsmap.size() == 237484);
  CHECK(nfkc.normalizer.add_dummy_prefix);
  CHECK(nfkc.normalizer.remove_extra_whitespaces);

  const spm::SpmModel demo = spm::read_spm_model(test::source_dir() + "/data_samples/spm_2k.model");
  CHECK(demo.model_type == spm::kSpmUnigram);
  CHECK(demo.byte_fallback);
  CHECK(demo.normalizer.name == "identity");
  CHECK(demo.normalizer.add_dummy_prefix);          // absent from the file: proto2's default
  CHECK(demo.normalizer.remove_extra_whitespaces);  // likewise
  // Scores are the float field 2: control pieces 0, normal pieces negative and not increasing.
  CHECK(demo.scores[1] == 0.0f);
  CHECK(demo.scores[259] < 0);
  CHECK(demo.scores[259] >= demo.scores[1999]);
}

TEST_CASE("spm normalizer applies NFKC and the whitespace rules of each model", "[spm]") {
  const spm::SpmEncoder nfkc(spm::read_spm_model(corpus("spm_test_unigram_1k.model")));
  // Full-width letters and a circled digit fold (NFKC); extra spaces go, one U+2581 leads.
  CHECK(nfkc.normalize("  \xEF\xBC\xA1\xEF\xBC\xA2  \xE2\x91\xA0 ") == "\xE2\x96\x81" "AB" "\xE2\x96\x81" "1");
  CHECK(nfkc.normalize("") == "");
  CHECK(nfkc.normalize("   ") == "");
  const spm::SpmEncoder internlm(spm::read_spm_model(corpus("internlm_v7.model")));
  // No dummy prefix, spaces kept as they are (escaped), no folding.
  CHECK(internlm.normalize(" a  b ") == "\xE2\x96\x81" "a" "\xE2\x96\x81\xE2\x96\x81" "b" "\xE2\x96\x81");
  CHECK(internlm.normalize("\xEF\xBC\xA1") == "\xEF\xBC\xA1");
  // A malformed byte becomes U+FFFD.
  CHECK(internlm.normalize("a\xFFz") == "a\xEF\xBF\xBDz");
}

TEST_CASE("spm encoder equals Python sentencepiece on every line of botchan and wagahaiwa", "[spm]") {
  test::TempDir dir("spm_corpora");
  for (const std::string& model : spm_models()) {
    const spm::SpmEncoder enc(spm::read_spm_model(model));
    for (const std::string name : {"botchan.txt", "wagahaiwa_nekodearu.txt"}) {
      const std::vector<std::string> texts = split_texts(test::read_all(corpus(name)));
      REQUIRE(texts.size() > 2000);
      INFO(model << " on " << name);
      check_texts(enc, model, texts, corpus(name), dir);
    }
  }
}

TEST_CASE("spm encoder equals Python sentencepiece on edge cases", "[spm]") {
  const std::vector<std::string> texts = {
      "",
      " ",
      "     ",
      "  leading and trailing  ",
      "a  b   c",
      "\t tab\tand\r control \x01\x02\x1b\x7f chars",
      "\xF0\x9F\x98\x80 emoji \xF0\x9F\xA6\x99\xF0\x9F\xA7\xAC and \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
      "\xEF\xBC\xA6\xEF\xBD\x95\xEF\xBD\x8C\xEF\xBD\x8C width \xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93",  // Ｆｕｌｌ １２３
      "\xE2\x91\xA0\xE2\x91\xA1\xE2\x91\xA2 circled, \xE3\x8D\xBF \xEF\xAC\x81 ligature",              // ①②③ ㍿ ﬁ
      "\xEF\xBD\xB6\xEF\xBE\x80\xEF\xBD\xB6\xEF\xBE\x85 half-width kana",                              // ｶﾀｶﾅ
      "e\xCC\x81 combining vs \xC3\xA9 precomposed",
      "\xE3\x80\x80ideographic\xE3\x80\x80space\xE3\x80\x80",
      "\xC2\xA0nbsp\xC2\xA0" "and\xE2\x80\x8Bzero width",
      "<s> </s> <unk> <eoh> <eoa> literal specials",
      "<0x41> byte piece text",
      "\xE5\x90\xBE\xE8\xBC\xA9\xE3\x81\xAF\xE7\x8C\xAB\xE3\x81\xA7\xE3\x81\x82\xE3\x82\x8B\xE3\x80\x82",  // 吾輩は猫である。
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xCE\xB1\xCE\xB2\xCE\xB3 \xD8\xB3\xD9\x84\xD8\xA7\xD9\x85",
      "x",
      "1234567890 3.14159 1,000,000",
      "def f(x):    return x**2  # code",
      "\xE2\x96\x81" "already escaped\xE2\x96\x81",
  };
  test::TempDir dir("spm_edge");
  std::string file;
  for (const std::string& t : texts) file += t + "\n";
  const std::string input = dir / "edge.txt";
  test::write_all(input, file);
  for (const std::string& model : spm_models()) {
    const spm::SpmEncoder enc(spm::read_spm_model(model));
    check_texts(enc, model, texts, input, dir);
  }
  // Hand-checked values: nothing to encode gives no ids; byte fallback spells an emoji in bytes.
  const spm::SpmEncoder demo(spm::read_spm_model(test::source_dir() + "/data_samples/spm_2k.model"));
  CHECK(demo.encode("").empty());
  CHECK(demo.encode("    ").empty());
  const std::vector<int64_t> emoji = demo.encode("\xF0\x9F\x98\x80");  // byte <0xNN> is id 3 + NN here
  REQUIRE(emoji.size() == 5);
  CHECK(std::vector<int64_t>(emoji.begin() + 1, emoji.end()) == std::vector<int64_t>{3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80});
  // Without byte fallback, a run of unknown characters is one <unk>.
  const spm::SpmEncoder nfkc(spm::read_spm_model(corpus("spm_test_unigram_1k.model")));
  const std::vector<int64_t> unk = nfkc.encode("\xF0\x9F\x98\x80\xF0\x9F\xA6\x99");
  CHECK(std::count(unk.begin(), unk.end(), 0) == 1);
}

TEST_CASE("spm encoder equals Python sentencepiece on random mixes of tricky characters", "[spm]") {
  // Spaces of several kinds, control characters, NUL, combining marks, full-width and half-width
  // forms, emoji sequences, CJK, special and byte piece spellings, U+2581 itself, U+10FFFF.
  const std::vector<std::string> pool = {
      " ", "  ", "\t", "\r", "\x01", "\x7f", std::string(1, '\0'), "\xE3\x80\x80", "\xC2\xA0", "\xE2\x80\x8B", "a",
      "Z", "\xC3\xA9", "e\xCC\x81", "\xEF\xBD\xB6", "\xEF\xBE\x80", "\xEF\xBC\xA1", "\xE2\x91\xA0", "\xE3\x8D\xBF",
      "\xEF\xAC\x81", "\xF0\x9F\x98\x80", "\xF0\x9F\xA6\x99", "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
      "\xE5\x90\xBE", "\xE8\xBC\xA9", "\xE3\x81\xAF", "\xE7\x8C\xAB", "\xE3\x80\x82", "<s>", "</s>", "<unk>", "<eoh>",
      "<0x41>", "\xE2\x96\x81", "1", "23", ".", ",", "the", " the", "ing", "\xD0\x9F\xD1\x80\xD0\xB8",
      "\xCE\xB1\xCE\xB2", "\xD8\xB3\xD9\x84", "\xEF\xBB\xBF", "\xEF\xBF\xBD", "\xF4\x8F\xBF\xBF"};
  std::mt19937_64 rng(20261202);
  std::vector<std::string> texts(3000);
  std::string file;
  for (std::string& t : texts) {
    const int n = static_cast<int>(rng() % 13);
    for (int i = 0; i < n; ++i) t += pool[rng() % pool.size()];
    file += t + "\n";
  }
  test::TempDir dir("spm_mix");
  const std::string input = dir / "mix.txt";
  test::write_all(input, file);
  for (const std::string& model : spm_models()) {
    const spm::SpmEncoder enc(spm::read_spm_model(model));
    check_texts(enc, model, texts, input, dir);
  }
}

TEST_CASE("spm encoder refuses what it does not implement", "[spm]") {
  spm::SpmModel m = spm::read_spm_model(test::source_dir() + "/data_samples/spm_2k.model");
  m.model_type = spm::kSpmWord;
  CHECK_THROWS_WITH(spm::SpmEncoder(m), Contains("model type 3 (3 word, 4 char) is not supported"));
  m.model_type = spm::kSpmUnigram;
  m.normalizer.precompiled_charsmap = std::string("\x10\x00\x00\x00" "abcd", 8);
  CHECK_THROWS_WITH(spm::SpmEncoder(m), Contains("trie of 16 bytes does not fit the 8-byte blob"));
}

TEST_CASE("spm exported tokenizer_config names the transformers class that encodes like SentencePiece", "[spm]") {
  // Measured with transformers 5.17 (bench/hf/check_logits.py --tokenizer-only): its LlamaTokenizer is a
  // BPE without the charsmap, exact only for a plain BPE model; the rest goes to SentencePieceBackend.
  const auto config_of = [](const std::string& model) {
    for (const auto& [name, text] : hf::tokenizer_files(spm::read_spm_model(model), model, 512))
      if (name == "tokenizer_config.json") return text;
    FAIL("no tokenizer_config.json");
    return std::string();
  };
  const std::string internlm = config_of(corpus("internlm_v7.model"));
  CHECK_THAT(internlm, Contains("\"tokenizer_class\": \"LlamaTokenizer\",\n  \"add_prefix_space\": false,\n"));
  CHECK_THAT(internlm, Contains("\"legacy\": true"));
  CHECK_THAT(internlm, !Contains("special_tokens_pattern"));
  for (const std::string& model : {corpus("spm_test_unigram_1k.model"), test::source_dir() + "/data_samples/spm_2k.model"}) {
    const std::string cfg = config_of(model);
    INFO(model);
    CHECK_THAT(cfg, Contains("\"tokenizer_class\": \"SentencePieceBackend\",\n  \"special_tokens_pattern\": \"bos\",\n"));
    CHECK_THAT(cfg, Contains("\"legacy\": true"));
    CHECK_THAT(cfg, !Contains("add_prefix_space"));
  }
}
