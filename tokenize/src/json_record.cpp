#include "json_record.h"

#include "loom/error.h"
#include "loom/tokenize/python_json.h"
#include "loom/tokenize/text.h"

namespace loom::tokenize {

namespace {

const char* type_name(simdjson::dom::element_type t) {
  using simdjson::dom::element_type;
  switch (t) {
    case element_type::OBJECT: return "an object";
    case element_type::ARRAY: return "an array";
    case element_type::STRING: return "a string";
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: return "a number";
    case element_type::BOOL: return "a boolean";
    case element_type::NULL_VALUE: return "null";
  }
  return "unknown";
}

}  // namespace

JsonRecordParser::JsonRecordParser(const ReaderOptions& options) : options_(options) {
  std::string part;
  for (char c : options_.text_key) {
    if (c == '.') key_parts_.push_back(std::move(part)), part.clear();
    else part.push_back(c);
  }
  key_parts_.push_back(std::move(part));
}

void JsonRecordParser::parse(std::string_view record, std::string_view raw_text, bool dumps, Document& doc) {
  doc.text.clear();
  doc.error.clear();
  // simdjson reads up to SIMDJSON_PADDING bytes past the end: parse from a padded copy.
  padded_.assign(record.data(), record.size());
  padded_.append(simdjson::SIMDJSON_PADDING, '\0');
  simdjson::dom::element root;
  auto err = parser_.parse(padded_.data(), record.size(), false).get(root);
  if (err) {
    if (err == simdjson::UTF8_ERROR) {
      const size_t at = find_invalid_utf8(record);
      doc.error = str("invalid UTF-8 at byte offset ", doc.offset + (at == std::string_view::npos ? 0 : at));
    } else {
      doc.error = str("malformed JSON: ", simdjson::error_message(err));
    }
    return;
  }
  if (options_.raw_records) {
    if (dumps) python_json_dumps(root, doc.text);
    else doc.text.assign(raw_text);
    return;
  }
  simdjson::dom::element cur = root;
  std::string path;
  for (const std::string& part : key_parts_) {
    if (cur.type() != simdjson::dom::element_type::OBJECT) {
      doc.error = path.empty() ? str("the record is ", type_name(cur.type()), ", expected an object with key '",
                                     options_.text_key, "'")
                               : str("'", path, "' is ", type_name(cur.type()), ", expected an object with key '",
                                     part, "'");
      return;
    }
    path += (path.empty() ? "" : ".") + part;
    // The last of repeated keys wins, as in Python's json.
    bool found = false;
    const simdjson::dom::object obj = cur.get_object().value_unsafe();
    for (auto field : obj) {
      if (field.key == part) cur = field.value, found = true;
    }
    if (!found) {
      doc.error = str("missing key '", path, "'");
      return;
    }
  }
  if (cur.type() != simdjson::dom::element_type::STRING) {
    doc.error = str("key '", options_.text_key, "' is ", type_name(cur.type()), ", expected a string");
    return;
  }
  doc.text.assign(cur.get_string().value_unsafe());
}

}  // namespace loom::tokenize
