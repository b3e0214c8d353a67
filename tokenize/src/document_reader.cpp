#include "loom/tokenize/document_reader.h"

#include "loom/error.h"
#include "loom/sys.h"
#include "readers.h"

namespace loom::tokenize {

std::string location(const std::string& path, const Document& doc) {
  if (doc.in_array) return str(path, ":", doc.line, ": record ", doc.record, ": ");
  return str(path, ":", doc.line, ": ");
}

InputFormat input_format_for(const std::string& path) {
  const std::string name = sys::basename(strip_compression_ext(path));
  const auto dot = name.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : name.substr(dot);
  if (ext == ".txt") return InputFormat::kTxt;
  if (ext == ".json") return InputFormat::kJson;
  if (ext == ".jsonl") return InputFormat::kJsonl;
  LOOM_FAIL(path, ": cannot tell the input format from the name: expected NAME.txt, NAME.json or NAME.jsonl,",
            " optionally followed by .gz or .zst");
}

const char* input_format_name(InputFormat f) {
  switch (f) {
    case InputFormat::kTxt: return "txt";
    case InputFormat::kJson: return "json";
    case InputFormat::kJsonl: return "jsonl";
  }
  return "?";
}

std::unique_ptr<DocumentReader> make_document_reader(const std::string& path, const ReaderOptions& options) {
  const InputFormat format = input_format_for(path);
  auto source = open_byte_source(path);
  switch (format) {
    case InputFormat::kTxt: return make_txt_reader(std::move(source), options);
    case InputFormat::kJsonl: return make_jsonl_reader(std::move(source), options);
    case InputFormat::kJson: return make_json_array_reader(std::move(source), options);
  }
  LOOM_ASSERT(false, "unhandled input format");
  return nullptr;
}

}  // namespace loom::tokenize
