#include "loom/tokenize/document_reader.h"

#include "loom/count_text.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "readers.h"

namespace loom::tokenize {

std::string location(const std::string& path, const Document& doc) {
  if (doc.in_array) return str(path, ":", doc.line, ": record ", doc.record, ": ");
  return str(path, ":", doc.line, ": ");
}

namespace {
bool format_of(const std::string& path, InputFormat& f) {
  const std::string name = sys::basename(strip_compression_ext(path));
  const auto dot = name.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : name.substr(dot);
  if (ext == ".txt") f = InputFormat::kTxt;
  else if (ext == ".json") f = InputFormat::kJson;
  else if (ext == ".jsonl") f = InputFormat::kJsonl;
  else return false;
  return true;
}
}  // namespace

bool has_input_format(const std::string& path) {
  InputFormat f;
  return format_of(path, f);
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    if (!sys::is_directory(p)) {
      out.push_back(p);
      continue;
    }
    size_t found = 0, other = 0;
    for (const std::string& f : sys::list_files(p)) {
      if (has_input_format(f)) out.push_back(f), ++found;
      else ++other;
    }
    LOOM_CHECK(found > 0, p, ": a folder with no input in it: expected files named NAME.txt, NAME.json or NAME.jsonl, ",
               "optionally followed by .gz or .zst (", other, " other files)");
    log::info(p, ": ", counted(found, "input"), other ? str(", ", counted(other, "other file"), " skipped") : std::string());
  }
  return out;
}

InputFormat input_format_for(const std::string& path) {
  InputFormat f;
  if (format_of(path, f)) return f;
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
    case InputFormat::kJson:
      if (options.json_lines) return make_jsonl_reader(std::move(source), options);
      return make_json_array_reader(std::move(source), options);
  }
  LOOM_ASSERT(false, "unhandled input format");
  return nullptr;
}

}  // namespace loom::tokenize
