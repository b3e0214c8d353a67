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

class JsonlReader : public DocumentReader {
 public:
  JsonlReader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) : lines_(std::move(src)), parser_(o) {}

  bool next(Document& doc) override {
    Line line;
    while (lines_.next(line)) {
      if (json_blank(line.text)) continue;
      doc.line = line.number;
      doc.offset = line.offset;
      doc.record = count_++;
      raw_.assign(line.text);
      if (line.had_newline) raw_.push_back('\n');
      parser_.parse(line.text, raw_, false, doc);
      return true;
    }
    return false;
  }
  uint64_t file_bytes_read() const override { return lines_.source().file_bytes_read(); }
  const std::string& path() const override { return lines_.source().path(); }

 private:
  LineReader lines_;
  JsonRecordParser parser_;
  std::string raw_;
  uint64_t count_ = 0;
};

}  // namespace

std::unique_ptr<DocumentReader> make_jsonl_reader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) {
  return std::make_unique<JsonlReader>(std::move(src), o);
}

}  // namespace loom::tokenize
