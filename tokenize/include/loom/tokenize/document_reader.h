// Documents of one input file. The readers (txt line/paragraph/file, jsonl, json array) share this
// interface over a ByteSource; make_document_reader() picks one from the file name
// (NAME.txt|json|jsonl[.gz|.zst]). Every document carries its place in the file for error messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom::tokenize {

enum class InputFormat { kTxt, kJson, kJsonl };
enum class TxtDoc { kLine, kParagraph, kFile };

struct ReaderOptions {
  TxtDoc txt_doc = TxtDoc::kLine;
  // Dotted path of the text in a json/jsonl record ("text", "meta.body").
  std::string text_key = "text";
  // Tokenize the whole record as InternLM's tools/tokenizer.py does: jsonl the raw line (newline
  // included), json Python's json.dumps(record).
  bool raw_records = false;
  // A .json input is JSON lines, one record a line, as Megatron-LM's preprocess_data.py reads it
  // ("loose json"); false: one top-level array of records.
  bool json_lines = false;
};

struct Document {
  std::string text;     // what is encoded
  uint64_t line = 0;    // 1-based line where the document starts
  uint64_t record = 0;  // 0-based index of the record (json/jsonl) or document (txt) in the file
  uint64_t offset = 0;  // byte offset of its first byte in the decompressed input
  bool in_array = false;  // an element of a json array: messages name the record too
  // Non-empty: this record is bad and has no text (what was wrong, without the location).
  std::string error;
};

// "FILE:LINE: " for messages about a document ("FILE:LINE: record R: " inside a json array, where
// one line may hold many records).
std::string location(const std::string& path, const Document& doc);

// Readers whose documents are made of whole lines (txt --txt-doc line and paragraph, jsonl) also hand
// out blocks of whole lines (DocumentReader::next_block, on the reading thread) that no document
// spans, which worker threads turn into documents, each with a LineParser of its own: splitting
// lines, checking UTF-8, stripping, joining paragraphs and parsing JSON then run in parallel and the
// reading thread only reads (and finds where to cut).
class LineParser {
 public:
  virtual ~LineParser() = default;
  // One line (without its ending; had_newline: it had one) that starts at byte `offset` of the
  // decompressed input and is line `number` (1-based, of the file or of the block). True: a
  // document ends here (doc.text or doc.error is set, doc.line is the number of its first line);
  // false: none does (a blank line, or a paragraph still open).
  virtual bool parse(std::string_view line, bool had_newline, uint64_t offset, uint64_t number, Document& doc) = 0;
  // After the last line of a block or file: true and the document still open (a paragraph), if
  // any; the parser is then empty for the next block.
  virtual bool finish(Document& /*doc*/) { return false; }
};

// Whole lines of the input, from byte `offset` of the decompressed stream.
struct LineBlock {
  std::string bytes;
  uint64_t offset = 0;
};

class DocumentReader {
 public:
  virtual ~DocumentReader() = default;
  // Line readers: a parser for one worker thread (any thread may call this); nullptr for the others.
  virtual std::unique_ptr<LineParser> make_line_parser() const { return nullptr; }
  // Line readers: the next whole lines, at least min_bytes of them unless the input ends first (a
  // longer line, or paragraph, is taken whole); false at the end. Not mixed with next().
  virtual bool next_block(LineBlock& /*block*/, size_t /*min_bytes*/) { return false; }
  // Next document or bad record; false at the end. Errors that make the rest of the file unreadable
  // (corrupt compression, a broken json array) throw loom::Error instead.
  virtual bool next(Document& doc) = 0;
  // Compressed bytes consumed so far, for progress.
  virtual uint64_t file_bytes_read() const = 0;
  virtual const std::string& path() const = 0;
};

// From the name without a compression extension; throws loom::Error for anything else.
InputFormat input_format_for(const std::string& path);
// Whether input_format_for(path) knows the name (NAME.txt|json|jsonl[.gz|.zst]).
bool has_input_format(const std::string& path);
// The inputs a command line names: a file is itself (whatever its name, so a wrong one is reported
// by input_format_for); a folder is walked recursively for files with a known name, sorted, and
// other files in it are skipped. A folder with no such file is an error.
std::vector<std::string> expand_inputs(const std::vector<std::string>& paths);
const char* input_format_name(InputFormat f);
std::unique_ptr<DocumentReader> make_document_reader(const std::string& path, const ReaderOptions& options);

}  // namespace loom::tokenize
