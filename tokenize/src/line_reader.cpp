#include "loom/tokenize/line_reader.h"

#include <cstring>

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

bool LineReader::next_block(std::string& block, uint64_t& offset, size_t min_bytes) {
  block.assign(buf_.data() + begin_, end_ - begin_);  // what the last call read past its cut
  begin_ = end_ = 0;
  size_t scanned = 0;  // block[0, scanned) holds no cut point
  for (;;) {
    if (block.size() >= min_bytes || eof_) {
      size_t cut = eof_ ? block.size() : 0;
      for (size_t i = block.size(); cut == 0 && i > scanned; --i) {
        const char c = block[i - 1];
        if (c == '\n' || (c == '\r' && i < block.size())) cut = i;
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
      scanned = block.size() > 0 ? block.size() - 1 : 0;  // a final "\r" may become a cut point
    }
    const size_t have = block.size(), want = have + (64 << 10) < min_bytes ? min_bytes - have : 64 << 10;
    block.resize(have + want);
    const size_t got = source_->read(block.data() + have, want);
    block.resize(have + got);
    if (got == 0) eof_ = true;
  }
}

}  // namespace loom::tokenize
