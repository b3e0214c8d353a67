// The DocumentReader variants, built only by make_document_reader(). Private to loom_tokenize.
#pragma once

#include <memory>

#include "loom/tokenize/byte_source.h"
#include "loom/tokenize/document_reader.h"

namespace loom::tokenize {

std::unique_ptr<DocumentReader> make_txt_reader(std::unique_ptr<ByteSource> src, const ReaderOptions& o);
std::unique_ptr<DocumentReader> make_jsonl_reader(std::unique_ptr<ByteSource> src, const ReaderOptions& o);
std::unique_ptr<DocumentReader> make_json_array_reader(std::unique_ptr<ByteSource> src, const ReaderOptions& o);

}  // namespace loom::tokenize
