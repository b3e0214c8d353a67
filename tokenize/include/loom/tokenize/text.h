// Text rules the readers share, chosen to match Python 3 (what InternLM's tools/tokenizer.py runs):
// str.strip()'s whitespace set, UTF-8 validity, and the whitespace split of very long documents.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace loom::tokenize {

// Python's str.isspace() for one code point (Py_UNICODE_ISSPACE).
bool is_python_space(char32_t c);
// Python's s.strip() on UTF-8 text (the input must be valid UTF-8).
std::string_view python_strip(std::string_view s);
// Returns the byte offset of the first invalid UTF-8 sequence, or npos when s is valid.
size_t find_invalid_utf8(std::string_view s);
// Whether s is valid UTF-8 and python_strip(s) is empty: what ends a txt paragraph. Reads only up to
// the first character that is not whitespace (or not valid), so a line of text costs a byte or two.
bool is_blank_line(std::string_view s);
// Cuts text into pieces of at most max_bytes each, concatenating back to text. A cut goes just
// before a whitespace character (the last one that keeps the piece under the cap), so the next piece
// starts with the space the way SentencePiece sees a word boundary; with no whitespace in reach, it
// goes at a UTF-8 character boundary. max_bytes >= 4 (one code point always fits).
std::vector<std::string_view> split_on_whitespace(std::string_view text, size_t max_bytes);

}  // namespace loom::tokenize
