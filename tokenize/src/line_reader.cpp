#include "loom/tokenize/line_reader.h"

#include <algorithm>
#include <cstring>

#include "loom/tokenize/text.h"

namespace loom::tokenize {

namespace {
constexpr size_t kChunk = 1 << 20;
}

LineReader::LineReader(std::unique_ptr<ByteSource> source) : source_(std::move(source)), buf_(kChunk) {}

// Moves the unread bytes to the front and reads more after them, growing for long lines.
bool LineReader::refill() {
  if (eof_) return false;
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buf_.size() - end_ < kChunk / 2) buf_.resize(buf_.size() * 2);
  size_t got = source_->read(buf_.data() + end_, buf_.size() - end_);
  if (got == 0) {
    eof_ = true;
    return false;
  }
  end_ += got;
  return true;
}

bool LineReader::next(Line& line) {
  size_t scan = begin_;
  for (;;) {
    if (skip_lf_ && begin_ < end_) {
      skip_lf_ = false;
      if (buf_[begin_] == '\n') {
        ++begin_;
        ++offset_;
      }
      scan = begin_;
    }
    while (scan < end_ && buf_[scan] != '\n' && buf_[scan] != '\r') ++scan;
    if (scan < end_) break;
    const size_t done = scan - begin_;
    if (!refill()) {
      if (skip_lf_) skip_lf_ = false;
      if (begin_ == end_) return false;
      scan = end_;  // a last line without a newline
      break;
    }
    scan = begin_ + done;
  }
  line.text = std::string_view(buf_.data() + begin_, scan - begin_);
  line.number = ++number_;
  line.offset = offset_;
  line.had_newline = scan < end_;
  size_t consumed = scan - begin_;
  if (scan < end_) {
    ++consumed;
    if (buf_[scan] == '\r') skip_lf_ = true;
  }
  begin_ += consumed;
  offset_ += consumed;
  return true;
}

namespace {

// The line ending bytes of b[lo, ...) from the last one back, below a bound that only goes down:
// memrchr finds each of "\n" and "\r" (several GB/s), and a position found stays the answer until
// the bound passes it, so a walk over many lines reads each byte at most once per character.
class EolWalk {
 public:
  EolWalk(std::string_view b, size_t lo) : b_(b), lo_(lo) {}
  // The last "\n" or "\r" in b[lo, hi), or npos; hi no larger than in the call before.
  size_t last_below(size_t hi) {
    const size_t n = find(lf_, '\n', hi), r = find(cr_, '\r', hi);
    if (n == std::string_view::npos) return r;
    if (r == std::string_view::npos) return n;
    return std::max(n, r);
  }

 private:
  struct Found {
    size_t at = std::string_view::npos;  // the last one below the bound searched
    bool searched = false;
  };
  size_t find(Found& f, char c, size_t hi) {
    if (!f.searched || (f.at != std::string_view::npos && f.at >= hi)) {
      const void* p = hi > lo_ ? memrchr(b_.data() + lo_, c, hi - lo_) : nullptr;
      f.at = p ? static_cast<size_t>(static_cast<const char*>(p) - b_.data()) : std::string_view::npos;
      f.searched = true;
    }
    return f.at;
  }
  std::string_view b_;
  size_t lo_;
  Found lf_, cr_;
};

// The end of the last blank line in b[from, size) whose line ending is decided (a final "\r" may
// yet be followed by "\n"), or 0; from is the start of a line and b[from, eol_free) holds no line
// ending. Walks back line by line from the end, so a block of text finds its cut within its last
// few lines. Without one it moves from to the start of the last line and eol_free past the bytes
// it searched: a paragraph or a line longer than many reads is scanned once, not once per read.
size_t last_blank_line_end(std::string_view b, size_t& from, size_t& eol_free) {
  const size_t hi = b.size() > from && b.back() == '\r' ? b.size() - 1 : b.size();
  EolWalk eols(b, eol_free);
  size_t t = eols.last_below(hi);  // the last byte of the line ending being looked at
  const size_t last_start = t == std::string_view::npos ? from : t + 1;
  while (t != std::string_view::npos) {
    const size_t ending = b[t] == '\n' && t > from && b[t - 1] == '\r' ? t - 1 : t;
    const size_t prev = eols.last_below(ending);
    const size_t start = prev == std::string_view::npos ? from : prev + 1;
    if (is_blank_line(b.substr(start, ending - start))) return t + 1;
    t = prev;
  }
  from = last_start;
  eol_free = std::max(hi, from);
  return 0;
}

}  // namespace

bool LineReader::next_block(std::string& block, uint64_t& offset, size_t min_bytes, CutAt at) {
  block.assign(buf_.data() + begin_, end_ - begin_);  // what the last call read past its cut
  begin_ = end_ = 0;
  size_t scanned = 0;  // block[0, scanned) holds no cut point
  size_t line_start = 0, eol_free = 0;  // CutAt::kBlankLine: see last_blank_line_end
  for (;;) {
    if (block.size() >= min_bytes || eof_) {
      size_t cut = eof_ ? block.size() : 0;
      if (at == CutAt::kBlankLine) {
        if (cut == 0) cut = last_blank_line_end(block, line_start, eol_free);
      } else {
        for (size_t i = block.size(); cut == 0 && i > scanned; --i) {
          const char c = block[i - 1];
          if (c == '\n' || (c == '\r' && i < block.size())) cut = i;
        }
      }
      if (cut > 0) {
        const size_t rest = block.size() - cut;
        if (buf_.size() < rest) buf_.resize(rest);
        std::memcpy(buf_.data(), block.data() + cut, rest);
        end_ = rest;
        block.resize(cut);
        offset = offset_;
        offset_ += cut;
        return true;
      }
      if (eof_) return false;
      if (at == CutAt::kLine) scanned = block.size() > 0 ? block.size() - 1 : 0;  // a final "\r" may become a cut point
    }
    const size_t have = block.size(), want = have + (64 << 10) < min_bytes ? min_bytes - have : 64 << 10;
    block.resize(have + want);
    const size_t got = source_->read(block.data() + have, want);
    block.resize(have + got);
    if (got == 0) eof_ = true;
  }
}

}  // namespace loom::tokenize
