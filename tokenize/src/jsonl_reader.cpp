// jsonl: one JSON record per line (universal newlines, as Python's text mode). Blank lines are
// not records. --raw-records encodes the line itself with its "\n", as tools/tokenizer.py does.
#include "json_record.h"
#include "loom/error.h"
#include "loom/tokenize/line_reader.h"
#include "readers.h"

namespace loom::tokenize {

namespace {

bool json_blank(std::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\t') return false;
  }
  return true;
}

// A line is a record; a blank one is none.
class JsonlLineParser : public LineParser {
 public:
  explicit JsonlLineParser(const ReaderOptions& o) : parser_(o) {}
  bool parse(std::string_view line, bool had_newline, uint64_t offset, uint64_t number, Document& doc) override {
    if (json_blank(line)) return false;
    doc.offset = offset;
    doc.line = number;
    raw_.assign(line);
    if (had_newline) raw_.push_back('\n');
    parser_.parse(line, raw_, false, doc);
    return true;
  }

 private:
  JsonRecordParser parser_;
  std::string raw_;
};

class JsonlReader : public DocumentReader {
 public:
  JsonlReader(std::unique_ptr<ByteSource> src, const ReaderOptions& o)
      : lines_(std::move(src)), options_(o), parser_(o) {}

  bool next(Document& doc) override {
    Line line;
    while (lines_.next(line)) {
      if (!parser_.parse(line.text, line.had_newline, line.offset, line.number, doc)) continue;
      doc.record = count_++;
      return true;
    }
    return false;
  }
  std::unique_ptr<LineParser> make_line_parser() const override { return std::make_unique<JsonlLineParser>(options_); }
  bool next_block(LineBlock& block, size_t min_bytes) override {
    return lines_.next_block(block.bytes, block.offset, min_bytes);
  }
  uint64_t file_bytes_read() const override { return lines_.source().file_bytes_read(); }
  const std::string& path() const override { return lines_.source().path(); }

 private:
  LineReader lines_;
  ReaderOptions options_;
  JsonlLineParser parser_;
  uint64_t count_ = 0;
};

}  // namespace

std::unique_ptr<DocumentReader> make_jsonl_reader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) {
  return std::make_unique<JsonlReader>(std::move(src), o);
}

}  // namespace loom::tokenize
