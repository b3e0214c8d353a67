// json: one top-level array of records, streamed. simdjson's on-demand API needs the whole document,
// so a small splitter finds each element's bounds (tracking strings, escapes and nesting depth) and
// each element is parsed alone: memory is one record, not the file. Python's json.load would reject
// the file on any structural error; so does this reader (a broken array has no trustworthy records).
#include <vector>

#include "json_record.h"
#include "loom/error.h"
#include "readers.h"

namespace loom::tokenize {

namespace {

constexpr size_t kParseChunk = 1 << 20;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

class JsonArrayReader : public DocumentReader {
 public:
  JsonArrayReader(std::unique_ptr<ByteSource> src, const ReaderOptions& o)
      : src_(std::move(src)), parser_(o), buf_(kParseChunk) {}

  bool next(Document& doc) override {
    if (state_ == State::kDone) return false;
    if (state_ == State::kStart) {
      int c = skip_ws();
      if (c != '[') fail_here(c < 0 ? "empty file" : "expected '[' (a json input is one array of records)");
      ++pos_, ++offset_;
      c = skip_ws();
      if (c == ']') return finish();
      state_ = State::kRecord;
    } else {
      int c = skip_ws();
      if (c == ']') return finish();
      if (c != ',') fail_here(str("expected ',' or ']' after record ", count_ - 1));
      ++pos_, ++offset_;
      c = skip_ws();
      if (c == ']' || c < 0) fail_here(str("expected a record after ',' (record ", count_, ")"));
    }
    doc.line = line_;
    doc.offset = offset_;
    doc.record = count_++;
    doc.in_array = true;
    scan_record(doc);
    parser_.parse(record_, {}, true, doc);
    return true;
  }
  uint64_t file_bytes_read() const override { return src_->file_bytes_read(); }
  const std::string& path() const override { return src_->path(); }

 private:
  enum class State { kStart, kRecord, kDone };

  // Current byte, refilling; -1 at the end of the stream.
  int peek() {
    if (pos_ == len_) {
      len_ = src_->read(buf_.data(), buf_.size());
      pos_ = 0;
      if (len_ == 0) return -1;
    }
    return static_cast<unsigned char>(buf_[pos_]);
  }
  int skip_ws() {
    for (;;) {
      int c = peek();
      if (c < 0 || !is_ws(static_cast<char>(c))) return c;
      if (c == '\n') ++line_;
      ++pos_, ++offset_;
    }
  }
  [[noreturn]] void fail_here(const std::string& what) {
    LOOM_FAIL(path(), ":", line_, ": ", what, " (byte offset ", offset_, ")");
  }

  bool finish() {
    ++pos_, ++offset_;
    const int c = skip_ws();
    if (c >= 0) fail_here("extra data after the top-level array");
    state_ = State::kDone;
    return false;
  }

  // Copies one element into record_: a container up to its matching bracket, a string up to its
  // closing quote, a scalar up to the next delimiter. simdjson then judges what is inside.
  void scan_record(const Document& doc) {
    record_.clear();
    int depth = 0;
    bool in_string = false, escape = false;
    const int first = peek();
    const bool scalar = first != '{' && first != '[' && first != '"';
    for (;;) {
      const int c = peek();
      if (c < 0) {
        LOOM_FAIL(path(), ":", doc.line, ": truncated json array: the file ends inside record ", doc.record,
                  " (byte offset ", doc.offset, ")");
      }
      const char ch = static_cast<char>(c);
      if (scalar && (is_ws(ch) || ch == ',' || ch == ']' || ch == '}')) return;
      record_.push_back(ch);
      ++pos_, ++offset_;
      if (ch == '\n') ++line_;
      if (in_string) {
        if (escape) escape = false;
        else if (ch == '\\') escape = true;
        else if (ch == '"') {
          in_string = false;
          if (depth == 0) return;  // a top-level string element
        }
        continue;
      }
      if (ch == '"') in_string = true;
      else if (ch == '{' || ch == '[') ++depth;
      else if ((ch == '}' || ch == ']') && --depth == 0) return;
    }
  }

  std::unique_ptr<ByteSource> src_;
  JsonRecordParser parser_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
  uint64_t line_ = 1, offset_ = 0, count_ = 0;
  State state_ = State::kStart;
  std::string record_;
};

}  // namespace

std::unique_ptr<DocumentReader> make_json_array_reader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) {
  return std::make_unique<JsonArrayReader>(std::move(src), o);
}

}  // namespace loom::tokenize
