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

}  // namespace loom::tokenize
