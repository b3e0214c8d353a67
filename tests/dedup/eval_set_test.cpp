// Evaluation files: items and their names from jsonl, json and txt; errors name the file and line.
#include <catch2/catch.hpp>

#include "loom/dedup/eval_set.h"
#include "loom/error.h"
#include "test_util.h"

using namespace loom;
using namespace loom::dedup;

TEST_CASE("evaluation items from jsonl, json and txt, named FILE:N", "[dedup][eval]") {
  test::TempDir dir("dedup_eval");
  test::write_all(dir / "a.jsonl", "{\"text\": \"first\"}\n\n{\"question\": 1, \"text\": \"second \\u00e9\"}\r\n");
  test::write_all(dir / "b.json", "[{\"text\": \"x\"}, {\"text\": \"y\", \"id\": 2}]");
  test::write_all(dir / "c.txt", "line one\n  \nline three\n");
  auto items = read_eval_items(dir / "a.jsonl", "text");
  REQUIRE(items.size() == 2);
  CHECK(items[0].name == dir / "a.jsonl:1");
  CHECK(items[1].name == dir / "a.jsonl:3");
  CHECK(items[1].text == "second \xc3\xa9");
  items = read_eval_items(dir / "b.json", "text");
  REQUIRE(items.size() == 2);
  CHECK(items[1].name == dir / "b.json:2");
  CHECK(items[1].text == "y");
  items = read_eval_items(dir / "c.txt", "text");
  REQUIRE(items.size() == 2);
  CHECK(items[1].name == dir / "c.txt:3");
  CHECK(items[1].text == "line three");
}

TEST_CASE("a bad evaluation file is refused naming the file, line and what was expected", "[dedup][eval]") {
  test::TempDir dir("dedup_eval_bad");
  test::write_all(dir / "a.jsonl", "{\"text\": \"ok\"}\n{\"prompt\": \"no text\"}\n");
  CHECK_THROWS_WITH(read_eval_items(dir / "a.jsonl", "text"),
                    Catch::Contains("a.jsonl:2: expected a string at key 'text'"));
  test::write_all(dir / "b.jsonl", "{\"text\": \"ok\"}\n{\"text\": \n");
  CHECK_THROWS_WITH(read_eval_items(dir / "b.jsonl", "text"), Catch::Contains("b.jsonl:2: not valid JSON"));
  test::write_all(dir / "c.json", "{\"text\": \"an object, not an array\"}");
  CHECK_THROWS_WITH(read_eval_items(dir / "c.json", "text"), Catch::Contains("c.json: expected a JSON array of objects"));
  test::write_all(dir / "d.csv", "text\n");
  CHECK_THROWS_WITH(read_eval_items(dir / "d.csv", "text"), Catch::Contains("d.csv: evaluation files are .txt, .json or .jsonl"));
}
