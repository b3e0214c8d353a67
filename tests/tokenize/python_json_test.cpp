#include <catch2/catch.hpp>
#include <sstream>

#include "loom/tokenize/python_json.h"
#include "tok_test_util.h"

using namespace loom::tokenize;
using loom::test::quote;
using loom::test::TempDir;

namespace {
// One JSON value per line; Python prints json.dumps(json.loads(line)) for each.
const char* kRecords[] = {
    R"({"text": "plain", "id": 7, "neg": -12, "big": 18446744073709551615})",
    R"({"a": [1, 2.5, true, false, null, {}, []], "nested": {"x": {"y": "z"}}})",
    R"({"jp": "吾輩は猫である", "emoji": "😺 cat", "bom": "﻿x", "nbsp": " "})",
    R"({"ctl": "tab\there\nnew\rcr\b\f\u0001\u001f\u007f", "q": "say \"hi\" \\ /"})",
    R"({"dup": 1, "other": 2, "dup": 3})",
    R"({"f": [0.1, 1e16, 1e15, 1e-5, 0.0001, 123456789012345678.0, 5e-324, 1.7976931348623157e308, -0.0, 100.0, 1.5e300, 12345.678, 2.5E-7, 1E2]})",
    R"(["top", "level", "array"])",
    R"("just a string")",
    R"(3.0)",
    R"({"esc": "\ud83d\ude00 \u00e9"})",
};
}  // namespace

TEST_CASE("python_json_dumps equals Python's json.dumps", "[tokenize][json]") {
  TempDir dir("tok_pyjson");
  std::string input;
  for (const char* r : kRecords) input += std::string(r) + "\n";
  loom::test::write_all(dir / "in.jsonl", input);
  auto r = loom::test::python_code(dir, "import json\nfor line in open(" + quote(dir / "in.jsonl") +
                                            ", encoding='utf-8'):\n    print(json.dumps(json.loads(line)))\n");
  REQUIRE(r.exit_code == 0);
  std::istringstream want(r.output);
  simdjson::dom::parser parser;
  for (const char* rec : kRecords) {
    std::string expected;
    REQUIRE(std::getline(want, expected));
    simdjson::dom::element e;
    REQUIRE(parser.parse(std::string(rec)).get(e) == simdjson::SUCCESS);
    std::string got;
    python_json_dumps(e, got);
    CHECK(got == expected);
  }
}

TEST_CASE("python_float_repr equals Python's repr", "[tokenize][json]") {
  const double values[] = {0.0, -0.0, 1.0, 0.1, 1.0 / 3, 1e16, 9999999999999998.0, 1e-4, 1e-5, 123.456, 1e300, 5e-324, 2.0 / 3 * 1e-7};
  TempDir dir("tok_repr");
  std::string code = "for v in [";
  char buf[64];
  for (double v : values) {
    std::snprintf(buf, sizeof(buf), "float('%.17g'), ", v);
    code += buf;
  }
  code += "]:\n    print(repr(v))\n";
  auto r = loom::test::python_code(dir, code);
  REQUIRE(r.exit_code == 0);
  std::istringstream want(r.output);
  for (double v : values) {
    std::string expected, got;
    REQUIRE(std::getline(want, expected));
    python_float_repr(v, got);
    CHECK(got == expected);
  }
}
