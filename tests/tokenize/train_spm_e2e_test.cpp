#include <catch2/catch.hpp>

#include "tok_test_util.h"

using namespace loom::test;

namespace {
std::string q(const std::string& s) { return quote(s); }
}

TEST_CASE("train-spm trains a byte-fallback model from the same documents, deterministically", "[tokenize][e2e][spm]") {
  TempDir dir("tok_spm");
  const std::string args = "train-spm --vocab-size 400 --threads 2 --normalization identity " + q(sample("botchan_head.txt")) + " " +
                           q(sample("botchan_tail.json")) + " --model-prefix ";
  auto r = tokenize(args + q(dir / "m1"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("from 480 docs") != std::string::npos);  // 400 non-empty lines + 80 records
  REQUIRE(tokenize(args + q(dir / "m2")).exit_code == 0);
  CHECK(read_all(dir / "m1.model") == read_all(dir / "m2.model"));
  // Python's sentencepiece loads it: the vocabulary size, byte pieces, a lossless round trip.
  auto py = python_code(dir, "import sentencepiece as spm\n"
                             "sp = spm.SentencePieceProcessor(model_file=" + q(dir / "m1.model") + ")\n"
                             "t = 'Botchan went to 松山 by boat.'\n"
                             "print(sp.get_piece_size(), sp.piece_to_id('<0xE6>') > 0, sp.decode(sp.encode(t)) == t)\n");
  INFO(py.output);
  CHECK(py.output == "400 True True\n");
}

TEST_CASE("the committed data_samples model is the documented 2000-piece byte-fallback model", "[tokenize][e2e][spm]") {
  TempDir dir("tok_spm_sample");
  auto py = python_code(dir, "import sentencepiece as spm\n"
                             "sp = spm.SentencePieceProcessor(model_file=" + q(sample("spm_2k.model")) + ")\n"
                             "print(sp.get_piece_size(), sp.bos_id(), sp.eos_id(), sp.piece_to_id('<0x00>'))\n");
  CHECK(py.output == "2000 1 2 3\n");
}

TEST_CASE("train-spm usage and input errors", "[tokenize][e2e][spm]") {
  TempDir dir("tok_spm_err");
  write_all(dir / "bad.jsonl", "{\"text\": \"a\"}\n{\"text\": 3}\n");
  auto r = tokenize("train-spm --vocab-size 100 --model-prefix " + q(dir / "m") + " " + q(dir / "bad.jsonl"));
  CHECK(r.exit_code == 1);
  CHECK(r.output.find(dir / "bad.jsonl:2: key 'text' is a number, expected a string") != std::string::npos);
  CHECK(list_dir(dir.path()) == "bad.jsonl\n");
  auto u = tokenize("train-spm --model-prefix " + q(dir / "m") + " " + q(dir / "bad.jsonl"));
  CHECK(u.exit_code == 2);
  CHECK(u.output.find("--vocab-size is required") != std::string::npos);
}
