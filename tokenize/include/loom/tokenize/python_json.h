// Python's json.dumps(value) with its defaults (ensure_ascii=True, separators ", " and ": ", keys in
// document order, a repeated key kept at its first place with its last value), for --raw-records on
// a json array: InternLM's tools/tokenizer.py encodes json.dumps(record), not the record's bytes.
#pragma once

#include <simdjson.h>

#include <string>

namespace loom::tokenize {

void python_json_dumps(simdjson::dom::element value, std::string& out);
// Python's repr(float): shortest round-trip digits, exponent form below 1e-4 and from 1e16.
void python_float_repr(double v, std::string& out);

}  // namespace loom::tokenize
