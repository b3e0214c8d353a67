// txt: Python's text-mode lines (universal newlines), each stripped with str.strip(); a BOM is
// kept (Python's "utf-8" codec does not drop it). Empty documents are not documents.
#include "loom/error.h"
#include "loom/tokenize/line_reader.h"
#include "loom/tokenize/text.h"
#include "readers.h"

namespace loom::tokenize {

namespace {

class TxtReader : public DocumentReader {
 public:
  TxtReader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) : lines_(std::move(src)), mode_(o.txt_doc) {}

  bool next(Document& doc) override {
    return mode_ == TxtDoc::kLine ? next_line(doc) : next_block(doc);
  }
  uint64_t file_bytes_read() const override { return lines_.source().file_bytes_read(); }
  const std::string& path() const override { return lines_.source().path(); }

 private:
  // Sets doc.error when the line is not UTF-8 (Python would raise UnicodeDecodeError).
  static bool check_utf8(std::string_view text, uint64_t offset, Document& doc) {
    const size_t bad = find_invalid_utf8(text);
    if (bad == std::string_view::npos) return true;
    doc.text.clear();
    doc.error = str("invalid UTF-8 at byte offset ", offset + bad);
    return false;
  }

  bool next_line(Document& doc) {
    Line line;
    while (lines_.next(line)) {
      doc.error.clear();
      doc.line = line.number;
      doc.offset = line.offset;
      if (!check_utf8(line.text, line.offset, doc)) {
        doc.record = count_++;
        return true;
      }
      const std::string_view s = python_strip(line.text);
      if (s.empty()) continue;
      doc.text.assign(s);
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
  TxtDoc mode_;
  uint64_t count_ = 0;
};

}  // namespace

std::unique_ptr<DocumentReader> make_txt_reader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) {
  return std::make_unique<TxtReader>(std::move(src), o);
}

}  // namespace loom::tokenize
