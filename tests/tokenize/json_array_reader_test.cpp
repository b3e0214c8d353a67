#include <catch2/catch.hpp>

#include "loom/error.h"
#include "loom/tokenize/document_reader.h"
#include "tok_test_util.h"

using namespace loom::tokenize;
using loom::test::TempDir;

namespace {
struct Read {
  std::vector<std::string> texts;  // text, or "ERROR <location><what>"
};
Read read_docs(const std::string& path, ReaderOptions opt = {}) {
  auto r = make_document_reader(path, opt);
  Read out;
  Document d;
  while (r->next(d)) out.texts.push_back(d.error.empty() ? d.text : "ERROR " + location(path, d) + d.error);
  return out;
}
}  // namespace

TEST_CASE("the json array splitter finds records around brackets and quotes inside strings", "[tokenize][reader]") {
  TempDir dir("tok_jarr");
  const std::string p = dir / "a.json";
  loom::test::write_all(p, " [\n {\"text\": \"a]\\\"}[,\"},\n \"x\",\n 3 , {\"text\": {\"deep\": 1}}, {\"meta\": {\"t\": \"in\"}},\n"
                           " {\"text\": \"last\"}\n ]\n");
  const Read r = read_docs(p);
  REQUIRE(r.texts.size() == 6);
  CHECK(r.texts[0] == "a]\"}[,");
  CHECK(r.texts[1] == "ERROR " + p + ":3: record 1: the record is a string, expected an object with key 'text'");
  CHECK(r.texts[2] == "ERROR " + p + ":4: record 2: the record is a number, expected an object with key 'text'");
  CHECK(r.texts[3] == "ERROR " + p + ":4: record 3: key 'text' is an object, expected a string");
  CHECK(r.texts[4] == "ERROR " + p + ":4: record 4: missing key 'text'");
  CHECK(r.texts[5] == "last");
  ReaderOptions dotted;
  dotted.text_key = "meta.t";
  CHECK(read_docs(p, dotted).texts[4] == "in");
  CHECK(read_docs(p, dotted).texts[5] == "ERROR " + p + ":5: record 5: missing key 'meta'");
}

TEST_CASE("json array structural errors stop the file with FILE:LINE and byte offset", "[tokenize][reader]") {
  TempDir dir("tok_jarr_bad");
  auto fails = [&](const std::string& name, const std::string& body) {
    loom::test::write_all(dir / name, body);
    return [&, name] { read_docs(dir / name); };
  };
  CHECK_THROWS_WITH(fails("t.json", "[{\"text\": \"a\"},\n {\"text\": \"b\"")(),
                    dir / "t.json" + ":2: truncated json array: the file ends inside record 1 (byte offset 17)");
  CHECK_THROWS_WITH(fails("c.json", "[{\"text\": \"a\"} {\"text\": \"b\"}]")(),
                    dir / "c.json" + ":1: expected ',' or ']' after record 0 (byte offset 15)");
  CHECK_THROWS_WITH(fails("x.json", "[{\"text\": \"a\"}] []")(),
                    dir / "x.json" + ":1: extra data after the top-level array (byte offset 16)");
  CHECK_THROWS_WITH(fails("o.json", "{\"text\": \"a\"}")(),
                    dir / "o.json" + ":1: expected '[' (a json input is one array of records) (byte offset 0)");
  CHECK_THROWS_WITH(fails("e.json", "")(), dir / "e.json" + ":1: empty file (byte offset 0)");
  CHECK_THROWS_WITH(fails("tc.json", "[{\"text\": \"a\"},]")(),
                    dir / "tc.json" + ":1: expected a record after ',' (record 1) (byte offset 15)");
}

TEST_CASE("jsonl and txt readers report bad records with FILE:LINE", "[tokenize][reader]") {
  TempDir dir("tok_readers");
  loom::test::write_all(dir / "a.jsonl", "{\"text\": \"one\"}\r\n\n  \n{\"text\": 2}\n{\"text\": \"x\"\n{\"t\": \"\xff\"}\n{\"text\": \"\"}\n");
  const Read j = read_docs(dir / "a.jsonl");
  REQUIRE(j.texts.size() == 5);
  CHECK(j.texts[0] == "one");
  CHECK(j.texts[1] == "ERROR " + dir / "a.jsonl" + ":4: key 'text' is a number, expected a string");
  CHECK_THAT(j.texts[2], Catch::StartsWith("ERROR " + dir / "a.jsonl" + ":5: malformed JSON: "));
  CHECK(j.texts[3] == "ERROR " + dir / "a.jsonl" + ":6: invalid UTF-8 at byte offset 53");
  CHECK(j.texts[4].empty());  // an empty text: counted and skipped by the pipeline

  ReaderOptions raw;
  raw.raw_records = true;
  CHECK(read_docs(dir / "a.jsonl", raw).texts[0] == "{\"text\": \"one\"}\n");

  loom::test::write_all(dir / "b.txt", "\xef\xbb\xbf first \r\n\r\n\tsecond\rthird\n \xff\n\nlast");
  CHECK(read_docs(dir / "b.txt").texts ==
        // The BOM is not whitespace: Python keeps the space after it.
        std::vector<std::string>{"\xef\xbb\xbf" " first", "second", "third", "ERROR " + dir / "b.txt" + ":5: invalid UTF-8 at byte offset 29", "last"});
  ReaderOptions para;
  para.txt_doc = TxtDoc::kParagraph;
  loom::test::write_all(dir / "c.txt", "\n a\nb \n\n\n c\r\n d\n");
  CHECK(read_docs(dir / "c.txt", para).texts == std::vector<std::string>{"a\nb", "c\n d"});
  para.txt_doc = TxtDoc::kFile;
  CHECK(read_docs(dir / "c.txt", para).texts == std::vector<std::string>{"a\nb \n\n\n c\n d"});
  CHECK_THROWS_WITH(make_document_reader(dir / "c.csv", {}), Catch::StartsWith(dir / "c.csv" + ": cannot tell the input format"));
}
