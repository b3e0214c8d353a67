// txt: Python's text-mode lines (universal newlines), each stripped with str.strip(); a BOM is
// kept (Python's "utf-8" codec does not drop it). Empty documents are not documents.
#include "loom/error.h"
#include "loom/tokenize/line_reader.h"
#include "loom/tokenize/text.h"
#include "readers.h"

namespace loom::tokenize {

namespace {

// Sets doc.error when the line is not UTF-8 (Python would raise UnicodeDecodeError).
bool check_utf8(std::string_view text, uint64_t offset, Document& doc) {
  const size_t bad = find_invalid_utf8(text);
  if (bad == std::string_view::npos) return true;
  doc.text.clear();
  doc.error = str("invalid UTF-8 at byte offset ", offset + bad);
  return false;
}

// --txt-doc line: a line is a document, stripped; a blank one is none.
class TxtLineParser : public LineParser {
 public:
  bool parse(std::string_view line, bool /*had_newline*/, uint64_t offset, Document& doc) override {
    doc.error.clear();
    doc.offset = offset;
    if (!check_utf8(line, offset, doc)) return true;
    const std::string_view s = python_strip(line);
    if (s.empty()) return false;
    doc.text.assign(s);
    return true;
  }
};

class TxtReader : public DocumentReader {
 public:
  TxtReader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) : lines_(std::move(src)), mode_(o.txt_doc) {}

  bool next(Document& doc) override {
    return mode_ == TxtDoc::kLine ? next_line(doc) : next_block(doc);
  }
  std::unique_ptr<LineParser> make_line_parser() const override {
    if (mode_ != TxtDoc::kLine) return nullptr;
    return std::make_unique<TxtLineParser>();
  }
  bool next_block(LineBlock& block, size_t min_bytes) override {
    return mode_ == TxtDoc::kLine && lines_.next_block(block.bytes, block.offset, min_bytes);
  }
  uint64_t file_bytes_read() const override { return lines_.source().file_bytes_read(); }
  const std::string& path() const override { return lines_.source().path(); }

 private:
  bool next_line(Document& doc) {
    Line line;
    while (lines_.next(line)) {
      doc.line = line.number;
      if (!line_parser_.parse(line.text, line.had_newline, line.offset, doc)) continue;
      doc.record = count_++;
      return true;
    }
    return false;
  }

  // Paragraph: lines up to a blank line; file: all lines. Lines are joined with "\n" (Python's
  // universal newlines) and the whole is stripped.
  bool next_block(Document& doc) {
    Line line;
    bool started = false, bad = false;
    doc.text.clear();
    doc.error.clear();
    while (lines_.next(line)) {
      bool ok = bad || check_utf8(line.text, line.offset, doc);
      if (!ok) bad = true;
      const bool blank = !bad && python_strip(line.text).empty();
      if (mode_ == TxtDoc::kParagraph && blank) {
        if (started) break;
        continue;
      }
      if (!started) {
        started = true;
        doc.line = line.number;
        doc.offset = line.offset;
      } else if (!bad) {
        doc.text.push_back('\n');
      }
      if (!bad) doc.text.append(line.text);
    }
    if (!started) return false;
    doc.record = count_++;
    if (bad) {
      doc.text.clear();
      return true;
    }
    const std::string_view s = python_strip(doc.text);
    if (s.empty()) return mode_ == TxtDoc::kParagraph ? next_block(doc) : false;
    doc.text = std::string(s);
    return true;
  }

  LineReader lines_;
  TxtLineParser line_parser_;
  TxtDoc mode_;
  uint64_t count_ = 0;
};

}  // namespace

std::unique_ptr<DocumentReader> make_txt_reader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) {
  return std::make_unique<TxtReader>(std::move(src), o);
}

}  // namespace loom::tokenize
