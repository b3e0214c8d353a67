#include "loom/tokenize/text.h"

#include <simdjson.h>

#include "loom/error.h"

namespace loom::tokenize {

bool is_python_space(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D:
    case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x20:
    case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Decodes the code point starting at s[i] (valid UTF-8 assumed); sets len.
char32_t decode_at(std::string_view s, size_t i, size_t& len) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return len = 1, c;
  if (c < 0xE0) return len = 2, ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
  if (c < 0xF0) return len = 3, ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
  len = 4;
  return ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
}

// Start of the code point that ends at byte end-1.
size_t char_start_before(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && is_continuation(static_cast<unsigned char>(s[i]))) --i;
  return i;
}

}  // namespace

std::string_view python_strip(std::string_view s) {
  size_t b = 0, e = s.size(), len = 0;
  while (b < e && is_python_space(decode_at(s, b, len))) b += len;
  while (e > b) {
    size_t start = char_start_before(s, e);
    if (!is_python_space(decode_at(s, start, len))) break;
    e = start;
  }
  return s.substr(b, e - b);
}

namespace {

// Length of the valid UTF-8 character at s[i] (i < s.size()), or 0 when the bytes there are not one.
size_t valid_char_len(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >= 0xC2 && c < 0xE0) ? 2 : (c >= 0xE0 && c < 0xF0) ? 3 : (c >= 0xF0 && c < 0xF5) ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if (!is_continuation(static_cast<unsigned char>(s[i + k]))) return 0;
  }
  const auto c1 = static_cast<unsigned char>(s[i + 1 < s.size() ? i + 1 : i]);
  if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
    return 0;  // overlong, surrogate or > U+10FFFF
  return n;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  // Fast path: simdjson validates at several GB/s; only a bad string is walked byte by byte.
  if (simdjson::validate_utf8(s.data(), s.size())) return std::string_view::npos;
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = valid_char_len(s, i);
    if (n == 0) return i;
    i += n;
  }
  return i;  // unreachable when simdjson and this walk agree; report the end rather than nothing
}

bool is_blank_line(std::string_view s) {
  // A character that is not whitespace makes the strip non-empty, and an invalid one the line
  // invalid: either way the rest of the line cannot make it blank.
  size_t i = 0, len = 0;
  while (i < s.size()) {
    if (valid_char_len(s, i) == 0 || !is_python_space(decode_at(s, i, len))) return false;
    i += len;
  }
  return true;
}

std::vector<std::string_view> split_on_whitespace(std::string_view text, size_t max_bytes) {
  LOOM_ASSERT(max_bytes >= 4, "max_bytes ", max_bytes);
  std::vector<std::string_view> pieces;
  while (text.size() > max_bytes) {
    // Last whitespace at a position in (0, max_bytes]: the piece is text[0, cut).
    size_t cut = 0;
    size_t i = 0, len = 0;
    while (i <= max_bytes && i < text.size()) {
      const char32_t c = decode_at(text, i, len);
      if (i > 0 && is_python_space(c)) cut = i;
      i += len;
    }
    if (cut == 0) {
      cut = max_bytes;
      while (cut > 0 && is_continuation(static_cast<unsigned char>(text[cut]))) --cut;
    }
    pieces.push_back(text.substr(0, cut));
    text.remove_prefix(cut);
  }
  if (!text.empty()) pieces.push_back(text);
  return pieces;
}

}  // namespace loom::tokenize
