// loom-tokenize's json_array reader on arbitrary bytes (document_fuzz.h has the input layout).
#include "document_fuzz.h"
#include "readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::drain_documents(data, size, loom::tokenize::make_json_array_reader);
  return 0;
}
