// loom's SentencePiece encoder (loom/spm_encoder.h) against Python sentencepiece: every line of
// two real corpora (English, and Japanese with many characters no 1k/2k vocab has) and edge cases,
// with the three models loom meets (InternLM's BPE with byte fallback and user-defined pieces, an
// NFKC unigram without byte fallback, the demo's identity unigram with byte fallback). The golden
// ids are computed at test time by tests/common/spm_golden.py with Debian's python3-sentencepiece.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

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
                                      test::quote(test::source_dir() + "/tests/common/spm_golden.py") + " " +
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

TEST_CASE("spm encoder equals Python sentencepiece on every line of botchan, wagahaiwa and Tang poems", "[spm]") {
  test::TempDir dir("spm_corpora");
  for (const std::string& model : spm_models()) {
    const spm::SpmEncoder enc(spm::read_spm_model(model));
    for (const std::string name : {"botchan.txt", "wagahaiwa_nekodearu.txt", "tang_poems.txt"}) {
      const std::vector<std::string> texts = split_texts(test::read_all(corpus(name)));
      REQUIRE(texts.size() > 900);
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

TEST_CASE("spm encoder equals Python sentencepiece on Chinese and Japanese spliced at random", "[spm]") {
  // Pieces of 1-6 characters cut from random places of the Tang poems and of wagahaiwa, glued in a
  // random order, now and then with a space, a Latin word or U+2581 between: the BPE chunk cache
  // cuts between characters no piece holds side by side, and here such neighbours meet everywhere.
  std::vector<std::string> chars;
  for (const std::string name : {"tang_poems.txt", "wagahaiwa_nekodearu.txt"}) {
    const std::string data = test::read_all(corpus(name));
    for (size_t at = 0; at < data.size();) {
      size_t n = 1;
      while (at + n < data.size() && (static_cast<unsigned char>(data[at + n]) & 0xC0) == 0x80) ++n;
      if (static_cast<unsigned char>(data[at]) >= 0x80) chars.push_back(data.substr(at, n));
      at += n;
    }
  }
  REQUIRE(chars.size() > 300000);
  const std::vector<std::string> glue = {" ", "  ", "\t", "a", "the ", "\xE2\x96\x81", "1", "<eoh>", "\xEF\xBC\x8C"};
  std::mt19937_64 rng(20261206);
  std::vector<std::string> texts(3000);
  std::string file;
  for (std::string& t : texts) {
    const int parts = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < parts; ++i) {
      const size_t from = rng() % chars.size(), len = 1 + rng() % 6;
      for (size_t c = from; c < std::min(chars.size(), from + len); ++c) t += chars[c];
      if (rng() % 3 == 0) t += glue[rng() % glue.size()];
    }
    file += t + "\n";
  }
  test::TempDir dir("spm_cjk");
  const std::string input = dir / "cjk.txt";
  test::write_all(input, file);
  const std::string model = corpus("internlm_v7.model");
  const spm::SpmEncoder enc(spm::read_spm_model(model));
  REQUIRE(enc.chunk_cache());
  check_texts(enc, model, texts, input, dir);
}

TEST_CASE("spm encoder refuses what it does not implement", "[spm]") {
  spm::SpmModel m = spm::read_spm_model(test::source_dir() + "/data_samples/spm_2k.model");
  m.model_type = spm::kSpmWord;
  CHECK_THROWS_WITH(spm::SpmEncoder(m), Contains("model type 3 (3 word, 4 char) is not supported"));
  m.model_type = spm::kSpmUnigram;
  m.normalizer.precompiled_charsmap = std::string("\x10\x00\x00\x00" "abcd", 8);
  CHECK_THROWS_WITH(spm::SpmEncoder(m), Contains("trie of 16 bytes does not fit the 8-byte blob"));
}

namespace {

// UTF-8 of a code point (any value below 0x110000, surrogates included: they make invalid UTF-8).
std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Texts that stress every rule of the normalizer and both models: characters from many scripts
// and blocks, digit runs, runs of every kind of whitespace, control and private-use characters,
// invalid UTF-8 (stray continuation bytes, truncated, overlong, surrogate and out-of-range
// sequences), words of up to 3000 bytes, emoji sequences and stacked combining marks. No '\n'
// (it separates texts).
std::vector<std::string> stress_texts(uint64_t seed, size_t count) {
  std::mt19937_64 rng(seed);
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::pair<uint32_t, uint32_t>> blocks = {
      {0x21, 0x7E},       {0xA1, 0x24F},      {0x370, 0x3FF},     {0x400, 0x4FF},    {0x590, 0x5FF},
      {0x600, 0x6FF},     {0x900, 0x97F},     {0xE00, 0xE7F},     {0x10A0, 0x10FF},  {0x1100, 0x11FF},
      {0x2000, 0x206F},   {0x2100, 0x22FF},   {0x2460, 0x24FF},   {0x2500, 0x259F},  {0x3000, 0x30FF},
      {0x3200, 0x33FF},   {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},  {0xFB00, 0xFB4F},
      {0xFE30, 0xFE4F},   {0xFF00, 0xFFEF},   {0xFFF0, 0xFFFF},   {0x1D400, 0x1D7FF}, {0x1F000, 0x1FAFF},
      {0x20000, 0x2A6DF}, {0xE0000, 0xE007F}};
  const std::vector<uint32_t> spaces = {0x20,   0x09,   0x0B,   0x0C,   0x0D,   0x85,   0xA0,   0x1680,
                                        0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007,
                                        0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
                                        0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x2581, 0x180E};
  const std::vector<std::string> invalid = {"\x80", "\xBF", "\xC0\x80", "\xC1\xBF", "\xC3", "\xE3\x81", "\xED\xA0\x80",
                                            "\xED\xBF\xBF", "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80",
                                            "\xF8\x88\x80\x80\x80", "\xFE", "\xFF", "\xE2\x96", "\xF0\x9F\x98"};
  const std::vector<std::string> emoji = {"\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
                                          "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
                                          "\xF0\x9F\x87\xAF\xF0\x9F\x87\xB5", "\xE2\x9D\xA4\xEF\xB8\x8F",
                                          "1\xEF\xB8\x8F\xE2\x83\xA3"};
  const std::vector<std::string> words = {"the", "The", "of", "and", "ing", "tion", "Botchan", "<s>", "</s>", "<unk>",
                                          "<eoh>", "<eoa>", "<0x41>", "\xE5\x90\xBE\xE8\xBC\xA9", "\xE7\x8C\xAB",
                                          "\xE3\x81\xA7\xE3\x81\x82\xE3\x82\x8B"};
  const auto code_point = [&](uint32_t lo, uint32_t hi) { return lo + static_cast<uint32_t>(rng() % (hi - lo + 1)); };
  std::vector<std::string> texts(count);
  for (std::string& t : texts) {
    const size_t parts = pick(40);
    for (size_t p = 0; p < parts; ++p) {
      switch (pick(12)) {
        case 0: case 1: {  // a run from one block: one script at a time, as real text
          const auto& [lo, hi] = blocks[pick(blocks.size())];
          for (size_t n = 1 + pick(8); n > 0; --n) t += utf8(code_point(lo, hi));
          break;
        }
        case 2:  // a whitespace run, mixed kinds
          for (size_t n = 1 + pick(6); n > 0; --n) t += utf8(spaces[pick(spaces.size())]);
          break;
        case 3:  // digits
          for (size_t n = 1 + pick(12); n > 0; --n) t += static_cast<char>('0' + pick(10));
          break;
        case 4:  // control (C0 but '\n', DEL, C1) and private use (BMP and plane 15)
          t += pick(2) ? utf8(pick(3) ? (pick(2) ? code_point(0, 9) : code_point(11, 31)) : code_point(0x7F, 0x9F))
                       : utf8(pick(2) ? code_point(0xE000, 0xF8FF) : code_point(0xF0000, 0xFFFFD));
          break;
        case 5:
          t += invalid[pick(invalid.size())];
          break;
        case 6:
          t += emoji[pick(emoji.size())];
          break;
        case 7: {  // a base letter with up to 5 combining marks
          t += static_cast<char>('a' + pick(26));
          for (size_t n = pick(6); n > 0; --n) t += utf8(code_point(0x300, 0x36F));
          break;
        }
        case 8: {  // a very long word: Latin, or CJK without spaces
          const bool cjk = pick(2);
          for (size_t n = 50 + pick(cjk ? 1000 : 3000); n > 0; --n)
            t += cjk ? utf8(code_point(0x4E00, 0x4FFF)) : std::string(1, static_cast<char>('a' + pick(26)));
          break;
        }
        default:
          t += (pick(2) ? " " : "") + words[pick(words.size())];
      }
    }
  }
  return texts;
}

}  // namespace

TEST_CASE("spm encoder equals Python sentencepiece on a generated corpus that stresses every rule", "[spm]") {
  const std::vector<std::string> texts = stress_texts(20270101, 1500);
  std::string file;
  for (const std::string& t : texts) file += t + "\n";
  test::TempDir dir("spm_stress");
  const std::string input = dir / "stress.txt";
  test::write_all(input, file);
  INFO(file.size() << " bytes of generated text");
  for (const std::string& model : spm_models()) {
    const spm::SpmEncoder enc(spm::read_spm_model(model));
    CHECK(check_texts(enc, model, texts, input, dir) == texts.size());
  }
}

TEST_CASE("spm encoder's chunk cache: on for InternLM's BPE, off for unigram, ids the same warm or cold", "[spm]") {
  const spm::SpmModel internlm = spm::read_spm_model(corpus("internlm_v7.model"));
  const spm::SpmEncoder bpe(internlm);
  CHECK(bpe.chunk_cache());
  const spm::SpmEncoder unigram(spm::read_spm_model(corpus("spm_test_unigram_1k.model")));
  CHECK_FALSE(unigram.chunk_cache());
  CHECK_THAT(unigram.why_no_chunk_cache(), Contains("unigram"));
  // An unused piece disables it: its split depends on the merges of the whole text.
  spm::SpmModel with_unused = internlm;
  with_unused.types[1000] = spm::kSpmUnused;
  CHECK_FALSE(spm::SpmEncoder(with_unused).chunk_cache());
  // The same text encoded again (every chunk now cached), and by a second encoder of the same model
  // in the same thread (its own cache), gives the same ids; so does each chunk alone, in any order.
  const std::string text = "Tab\tafter  two  spaces\t\t then \n\n newline and\t\ttabs, <eoh> user piece\t x";
  const std::vector<int64_t> first = bpe.encode(text);
  CHECK(bpe.encode(text) == first);
  const spm::SpmEncoder other(internlm);
  CHECK(other.encode(text) == first);
  CHECK(bpe.encode("spaces\t\t then") == other.encode("spaces\t\t then"));
  // Chinese and Japanese are cut between characters no piece holds side by side: the ids of a
  // text are those of its chunks one after the other, however the cache was warmed.
  const std::string cjk = "秦川雄帝宅，函谷壯皇居。吾輩は猫である。名前はまだ無い。今天天气晴朗适合出门散步";
  const std::vector<int64_t> cold = spm::SpmEncoder(internlm).encode(cjk);
  CHECK(bpe.encode(cjk) == cold);
  CHECK(bpe.encode(cjk) == cold);
  const std::vector<int64_t> weather = other.encode("今天天气晴朗适合出门散步");
  CHECK(weather == std::vector<int64_t>{67577, 69095, 63010, 61770, 67783, 69301, 74732});
}
