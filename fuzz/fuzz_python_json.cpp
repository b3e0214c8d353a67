// loom-tokenize's json.dumps emitter (--raw-records on a json array) on any JSON simdjson accepts.
// Besides not crashing, the output must be JSON again, ASCII only (ensure_ascii), and a fixed
// point: dumps(parse(dumps(x))) == dumps(x), which holds for Python's json.dumps too (floats print
// as shortest round-trip reprs, strings re-escape the same way).
#include <simdjson.h>

#include <string>

#include "loom/error.h"
#include "loom/tokenize/python_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const simdjson::padded_string in(reinterpret_cast<const char*>(data), size);
  if (parser.parse(in).get(root)) return 0;  // not JSON: the readers report it before dumps
  std::string once;
  loom::tokenize::python_json_dumps(root, once);
  for (unsigned char c : once) LOOM_ASSERT(c < 0x80, "non-ASCII byte ", int(c), " in json.dumps output ", once);
  simdjson::dom::parser again;
  simdjson::dom::element root2;
  const simdjson::padded_string out(once);
  const auto err = again.parse(out).get(root2);
  LOOM_ASSERT(!err, "json.dumps output is not JSON (", simdjson::error_message(err), "): ", once);
  std::string twice;
  loom::tokenize::python_json_dumps(root2, twice);
  LOOM_ASSERT(twice == once, "json.dumps is not a fixed point: ", once, " -> ", twice);
  return 0;
}
