// Lines of a ByteSource the way Python's text mode yields them (universal newlines): "\n", "\r\n"
// and a lone "\r" each end a line. Streams through a buffer; memory is the longest line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/tokenize/byte_source.h"

namespace loom::tokenize {

struct Line {
  std::string_view text;  // without its line ending; valid until the next call to next()
  uint64_t number = 0;    // 1-based
  uint64_t offset = 0;    // byte offset of the line's first byte in the (decompressed) stream
  bool had_newline = false;
};

class LineReader {
 public:
  explicit LineReader(std::unique_ptr<ByteSource> source);
  // False at the end of the stream.
  bool next(Line& line);
  // Instead of next(): the next whole lines, at least min_bytes unless the stream ends (a block is
  // cut after a "\n", or after a "\r" whose next byte is known and is not "\n", so no line ending
  // is split); block.offset is the offset of its first byte. False at the end.
  // With at == kBlankLine the cut also ends a blank line (is_blank_line: valid UTF-8, only Python
  // whitespace), so no txt paragraph spans two blocks (a longer one is taken whole); only the
  // stream's end cuts elsewhere.
  enum class CutAt { kLine, kBlankLine };
  bool next_block(std::string& block, uint64_t& offset, size_t min_bytes, CutAt at = CutAt::kLine);
  const ByteSource& source() const { return *source_; }

 private:
  bool refill();
  std::unique_ptr<ByteSource> source_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  bool skip_lf_ = false;  // the previous line ended with '\r': a '\n' right after belongs to it
  uint64_t number_ = 0, offset_ = 0;
};

// The lines of a block from LineReader::next_block, the way next() yields them:
// f(text, offset of text in the block, had_newline) for each, in order.
template <typename F>
void for_each_line(std::string_view block, F&& f) {
  const char* const base = block.data();
  const char* p = base;
  const char* const end = base + block.size();
  while (p < end) {
    const char* e = p;
    while (e < end && *e != '\n' && *e != '\r') ++e;
    f(std::string_view(p, static_cast<size_t>(e - p)), static_cast<size_t>(p - base), e < end);
    if (e == end) break;
    p = e + 1;
    if (*e == '\r' && p < end && *p == '\n') ++p;
  }
}

}  // namespace loom::tokenize
