// Turns one JSON record's bytes into a Document's text: the string at a dotted key, or the whole
// record (raw line for jsonl, Python's json.dumps for a json array element). Private to the readers.
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>
#include <vector>

#include "loom/tokenize/document_reader.h"

namespace loom::tokenize {

class JsonRecordParser {
 public:
  explicit JsonRecordParser(const ReaderOptions& options);
  // Parses record (any bytes) and fills doc.text, or doc.error with what was wrong.
  // raw: the text for --raw-records when not dumps (jsonl's raw line); empty -> json.dumps.
  void parse(std::string_view record, std::string_view raw_text, bool dumps, Document& doc);

 private:
  ReaderOptions options_;
  std::vector<std::string> key_parts_;
  simdjson::dom::parser parser_;
  std::string padded_;
};

}  // namespace loom::tokenize
