// txt: Python's text-mode lines (universal newlines), each stripped with str.strip(), or paragraphs
// of them, or the whole file; a BOM is kept (Python's "utf-8" codec does not drop it). Empty
// documents are not documents.
#include <algorithm>
#include <vector>

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
  bool parse(std::string_view line, bool /*had_newline*/, uint64_t offset, uint64_t number, Document& doc) override {
    doc.error.clear();
    doc.offset = offset;
    doc.line = number;
    if (!check_utf8(line, offset, doc)) return true;
    const std::string_view s = python_strip(line);
    if (s.empty()) return false;
    doc.text.assign(s);
    return true;
  }
};

// --txt-doc paragraph: a run of non-blank lines (is_blank_line), joined with "\n" (Python's
// universal newlines) and stripped. A line with invalid UTF-8 makes its paragraph a bad record,
// as a bad line is one in line mode; the paragraphs after it are read as usual (such a line is
// never blank, so it cannot move a paragraph boundary). UTF-8 is checked once per paragraph, not
// per line (a call per line costs more than the check).
class TxtParagraphParser : public LineParser {
 public:
  bool parse(std::string_view line, bool /*had_newline*/, uint64_t offset, uint64_t number, Document& doc) override {
    if (is_blank_line(line)) return finish(doc);
    if (!open_) {
      open_ = true;
      line_ = number;
      text_.clear();
      starts_.clear();
    } else {
      text_.push_back('\n');
    }
    starts_.push_back({text_.size(), offset});
    text_.append(line);
    return false;
  }
  bool finish(Document& doc) override {
    if (!open_) return false;
    open_ = false;
    doc.line = line_;
    doc.offset = starts_.front().offset;
    const size_t bad = find_invalid_utf8(text_);
    if (bad != std::string_view::npos) {
      // Its input offset: from the start of the line it is in (a joining "\n" is valid UTF-8).
      auto it = std::upper_bound(starts_.begin(), starts_.end(), bad,
                                 [](size_t at, const LineStart& l) { return at < l.text_at; });
      --it;
      doc.text.clear();
      doc.error = str("invalid UTF-8 at byte offset ", it->offset + (bad - it->text_at));
      return true;
    }
    doc.error.clear();
    const std::string_view s = python_strip(text_);  // not empty: its lines are not blank
    if (s.data() == text_.data()) {
      text_.resize(s.size());
      doc.text.swap(text_);  // no copy; text_ takes doc's old buffer for the next paragraph
    } else {
      doc.text.assign(s);
    }
    return true;
  }

 private:
  struct LineStart {
    size_t text_at;   // where the line starts in text_
    uint64_t offset;  // and in the input
  };
  bool open_ = false;
  uint64_t line_ = 0;  // of the open paragraph's first line
  std::string text_;
  std::vector<LineStart> starts_;
};

class TxtReader : public DocumentReader {
 public:
  TxtReader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) : lines_(std::move(src)), mode_(o.txt_doc) {}

  bool next(Document& doc) override {
    return mode_ == TxtDoc::kFile ? next_file(doc) : next_lines(doc);
  }
  std::unique_ptr<LineParser> make_line_parser() const override {
    if (mode_ == TxtDoc::kLine) return std::make_unique<TxtLineParser>();
    if (mode_ == TxtDoc::kParagraph) return std::make_unique<TxtParagraphParser>();
    return nullptr;
  }
  bool next_block(LineBlock& block, size_t min_bytes) override {
    if (mode_ == TxtDoc::kFile) return false;
    return lines_.next_block(block.bytes, block.offset, min_bytes,
                             mode_ == TxtDoc::kLine ? LineReader::CutAt::kLine : LineReader::CutAt::kBlankLine);
  }
  uint64_t file_bytes_read() const override { return lines_.source().file_bytes_read(); }
  const std::string& path() const override { return lines_.source().path(); }

 private:
  // Line and paragraph modes, one line at a time through the same parsers the blocks use.
  bool next_lines(Document& doc) {
    LineParser& parser = mode_ == TxtDoc::kLine ? static_cast<LineParser&>(line_parser_) : paragraph_parser_;
    Line line;
    bool got = false;
    while (!got && lines_.next(line)) got = parser.parse(line.text, line.had_newline, line.offset, line.number, doc);
    if (!got) got = parser.finish(doc);
    if (!got) return false;
    doc.record = count_++;
    return true;
  }

  // File: all lines joined with "\n" (Python's universal newlines), the whole stripped.
  bool next_file(Document& doc) {
    Line line;
    bool started = false, bad = false;
    doc.text.clear();
    doc.error.clear();
    while (lines_.next(line)) {
      if (!bad && !check_utf8(line.text, line.offset, doc)) bad = true;
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
    if (s.empty()) return false;
    doc.text = std::string(s);
    return true;
  }

  LineReader lines_;
  TxtLineParser line_parser_;
  TxtParagraphParser paragraph_parser_;
  TxtDoc mode_;
  uint64_t count_ = 0;
};

}  // namespace

std::unique_ptr<DocumentReader> make_txt_reader(std::unique_ptr<ByteSource> src, const ReaderOptions& o) {
  return std::make_unique<TxtReader>(std::move(src), o);
}

}  // namespace loom::tokenize
