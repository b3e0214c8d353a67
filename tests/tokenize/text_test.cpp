#include <catch2/catch.hpp>
#include <random>
#include <sstream>

#include "loom/tokenize/text.h"
#include "tok_test_util.h"

using namespace loom::tokenize;
using loom::test::TempDir;

TEST_CASE("is_python_space equals Python str.isspace over every code point", "[tokenize][text]") {
  TempDir dir("tok_space");
  auto r = loom::test::python_code(
      dir, "print(' '.join(str(c) for c in range(0x110000) if chr(c).isspace()))\n");
  REQUIRE(r.exit_code == 0);
  std::istringstream in(r.output);
  std::vector<uint32_t> want;
  for (uint32_t c; in >> c;) want.push_back(c);
  REQUIRE(want.size() == 29);  // Python 3.11's set
  std::vector<uint32_t> got;
  for (uint32_t c = 0; c < 0x110000; ++c) {
    if (is_python_space(static_cast<char32_t>(c))) got.push_back(c);
  }
  CHECK(got == want);
}

TEST_CASE("python_strip strips Python whitespace and keeps a BOM", "[tokenize][text]") {
  CHECK(python_strip("  \t hello world \r\n") == "hello world");
  CHECK(python_strip("\xe3\x80\x80\xc2\xa0" "x y\xe2\x80\x83") == "x y");  // U+3000, U+00A0 .. U+2003
  CHECK(python_strip("\xef\xbb\xbf" "abc ") == "\xef\xbb\xbf" "abc");      // U+FEFF is not whitespace
  CHECK(python_strip("\xe2\x80\x8b") == "\xe2\x80\x8b");                // U+200B neither
  CHECK(python_strip(" \x1c\x1f ").empty());
  CHECK(python_strip("").empty());
}

TEST_CASE("is_blank_line is valid UTF-8 that python_strip empties", "[tokenize][text]") {
  CHECK(is_blank_line(""));
  CHECK(is_blank_line(" \t\x0b\x0c\x1c\x1f"));
  CHECK(is_blank_line("\xe3\x80\x80\xc2\xa0\xc2\x85\xe2\x80\xa8"));  // U+3000, U+00A0, U+0085, U+2028
  CHECK(!is_blank_line("  x"));
  CHECK(!is_blank_line("\xef\xbb\xbf"));          // a BOM is not whitespace
  CHECK(!is_blank_line("\xe0\x82\x85"));          // U+0085 spelled overlong: invalid, so not blank
  CHECK(!is_blank_line(" \xe3\x80"));              // truncated U+3000
  CHECK(!is_blank_line(" \x80"));                   // a lone continuation byte
}

TEST_CASE("find_invalid_utf8 reports the first bad byte", "[tokenize][text]") {
  CHECK(find_invalid_utf8("plain ascii") == std::string_view::npos);
  CHECK(find_invalid_utf8("\xe5\x90\xbe\xe8\xbc\xa9") == std::string_view::npos);
  CHECK(find_invalid_utf8("abc\xff" "def") == 3);
  CHECK(find_invalid_utf8("ab\xe3\x81") == 2);          // truncated sequence
  CHECK(find_invalid_utf8("\xc0\xaf") == 0);            // overlong
  CHECK(find_invalid_utf8("x\xed\xa0\x80") == 1);       // surrogate
  CHECK(find_invalid_utf8("xy\xf4\x90\x80\x80") == 2);  // above U+10FFFF
}

TEST_CASE("split_on_whitespace cuts before the last space under the cap", "[tokenize][text]") {
  using V = std::vector<std::string_view>;
  CHECK(split_on_whitespace("aaa bbb ccc", 8) == V{"aaa bbb", " ccc"});
  CHECK(split_on_whitespace("aaa bbb ccc", 11) == V{"aaa bbb ccc"});
  CHECK(split_on_whitespace("abcdefghij", 4) == V{"abcd", "efgh", "ij"});
  // No whitespace: cut at a character boundary (3-byte characters, cap 7 -> 6 bytes per piece).
  CHECK(split_on_whitespace("\xe7\x8c\xab\xe7\x8c\xab\xe7\x8c\xab", 7) == V{"\xe7\x8c\xab\xe7\x8c\xab", "\xe7\x8c\xab"});
}

TEST_CASE("split_on_whitespace property: pieces tile the text, fit the cap, cut at spaces", "[tokenize][text]") {
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "b", " ", "\n", "\xe3\x80\x80", "\xe7\x8c\xab", "\xf0\x9f\x98\xba"};
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    const int n = static_cast<int>(rng() % 200);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
    const size_t cap = 4 + rng() % 40;
    const auto pieces = split_on_whitespace(text, cap);
    std::string joined;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const auto& p = pieces[k];
      REQUIRE(!p.empty());
      REQUIRE(p.size() <= cap);
      REQUIRE(find_invalid_utf8(p) == std::string_view::npos);
      if (k > 0) {
        // Either this piece starts at whitespace, or the previous piece had none to cut at.
        const bool starts_space = p[0] == ' ' || p[0] == '\n' || p.substr(0, 3) == "\xe3\x80\x80";
        const auto& prev = pieces[k - 1];
        bool prev_has_space = false;
        for (size_t i = 1; i < prev.size(); ++i) {
          if (prev[i] == ' ' || prev[i] == '\n' || prev.substr(i, 3) == "\xe3\x80\x80") prev_has_space = true;
        }
        REQUIRE((starts_space || !prev_has_space));
      }
      joined += p;
    }
    REQUIRE(joined == text);
  }
}
