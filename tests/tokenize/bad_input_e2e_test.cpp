// Every bad-input mode of loom-tokenize: the exact message with FILE:LINE, exit code 1 (2 for bad
// usage), and nothing left in the output folder; --on-error skip keeps the good records.
#include <catch2/catch.hpp>

#include "loom/shard_format.h"
#include "tok_test_util.h"

using namespace loom::test;

namespace {
std::string q(const std::string& s) { return quote(s); }

struct Failed {
  int code;
  std::string output, left;  // left: what is in the output folder afterwards
};
Failed fail_run(const TempDir& dir, const std::string& args) {
  run("rm -rf " + q(dir / "out"));
  auto r = tokenize("--model " + q(internlm_model()) + " --output-dir " + q(dir / "out") + " " + args);
  return {r.exit_code, r.output, list_dir(dir / "out")};
}
}  // namespace

TEST_CASE("bad records stop the job with FILE:LINE and leave no shard", "[tokenize][e2e][errors]") {
  TempDir dir("tok_bad");
  write_all(dir / "m.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"cut\"\n");
  write_all(dir / "k.jsonl", "{\"text\": \"fine\"}\n\n{\"body\": \"no text\"}\n");
  write_all(dir / "n.jsonl", "{\"text\": [\"not\", \"a string\"]}\n");
  write_all(dir / "u.txt", "good line\nstill good\nbad \xc3\x28 byte\n");
  write_all(dir / "u.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"bad \xe2\x82 utf8\"}\n");
  write_all(dir / "a.json", "[\n{\"text\": \"ok\"},\n{\"text\": 12}\n]\n");
  struct Case {
    std::string file, message;
  };
  const Case cases[] = {
      {"m.jsonl", "m.jsonl:2: malformed JSON: The JSON document has an improper structure"},
      {"k.jsonl", "k.jsonl:3: missing key 'text'"},
      {"n.jsonl", "n.jsonl:1: key 'text' is an array, expected a string"},
      {"u.txt", "u.txt:3: invalid UTF-8 at byte offset 25"},
      {"u.jsonl", "u.jsonl:2: invalid UTF-8 at byte offset 29"},
      {"a.json", "a.json:3: record 1: key 'text' is a number, expected a string"},
  };
  for (const Case& c : cases) {
    SECTION(c.file) {
      const Failed f = fail_run(dir, q(dir / c.file));
      INFO(f.output);
      CHECK(f.code == 1);
      CHECK(f.output.find("ERROR " + dir / c.message) != std::string::npos);
      CHECK(f.output.find("(--on-error fail stops here; --on-error skip would skip this record)") != std::string::npos);
      CHECK(f.left.empty());  // not even a temporary file
    }
  }
  SECTION("a bad second input leaves the first one's complete shard and nothing of its own") {
    const Failed f = fail_run(dir, q(sample("botchan_head.txt")) + " " + q(dir / "k.jsonl"));
    CHECK(f.code == 1);
    CHECK(f.left == "botchan_head.bin\nbotchan_head.bin.meta\n");
  }
}

TEST_CASE("on-error skip keeps every good record and lists the bad ones", "[tokenize][e2e][errors]") {
  TempDir dir("tok_skip");
  std::string body;
  for (int i = 0; i < 30; ++i) body += i % 3 == 1 ? "{\"text\": " + std::to_string(i) + "}\n" : "{\"text\": \"doc " + std::to_string(i) + "\"}\n";
  write_all(dir / "s.jsonl", body);
  auto r = tokenize("--model " + q(internlm_model()) + " --output-dir " + q(dir / "out") + " --on-error skip --no-bos --no-eos " + q(dir / "s.jsonl"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("skipped " + dir / "s.jsonl" + ":2: key 'text' is a number, expected a string") != std::string::npos);
  CHECK(r.output.find("... and 0 more") == std::string::npos);
  CHECK(r.output.find("20 docs") != std::string::npos);
  CHECK(r.output.find("skipped 10 bad records") != std::string::npos);
  // The kept documents are exactly the good ones, in order: compare with a file of only those.
  std::string good;
  for (int i = 0; i < 30; ++i) if (i % 3 != 1) good += "{\"text\": \"doc " + std::to_string(i) + "\"}\n";
  run("mkdir -p " + q(dir / "good"));
  write_all(dir / "good/s.jsonl", good);
  REQUIRE(tokenize("--model " + q(internlm_model()) + " --output-dir " + q(dir / "ref") + " --no-bos --no-eos " + q(dir / "good/s.jsonl")).exit_code == 0);
  CHECK(read_all(dir / "out/s.bin") == read_all(dir / "ref/s.bin"));
  CHECK(read_all(dir / "out/s.bin.meta") == read_all(dir / "ref/s.bin.meta"));
}

TEST_CASE("environment and input-set errors exit 1 with a clear message", "[tokenize][e2e][errors]") {
  TempDir dir("tok_env");
  run("mkdir -p " + q(dir / "x") + " " + q(dir / "y"));
  write_all(dir / "x/a.txt", "hello\n");
  write_all(dir / "y/a.jsonl", "{\"text\": \"hello\"}\n");
  write_all(dir / "blank.txt", "\n  \n\t\n");
  write_all(dir / "t.csv", "a,b\n");
  REQUIRE(run("gzip -c " + q(corpus("botchan.txt")) + " | head -c 5000 > " + q(dir / "cut.txt.gz")).exit_code == 0);
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {q(dir / "x/a.txt") + " " + q(dir / "y/a.jsonl"), "inputs " + dir / "x/a.txt" + " and " + dir / "y/a.jsonl" + " would both write " + dir / "out/a.bin"},
      {q(dir / "blank.txt"), dir / "blank.txt" + ": no documents to write (0 bad, 0 empty); an empty shard is not written"},
      {q(dir / "t.csv"), dir / "t.csv" + ": cannot tell the input format from the name: expected NAME.txt, NAME.json or NAME.jsonl"},
      {q(dir / "missing.txt"), dir / "missing.txt" + ": no such input file"},
      {q(dir / "cut.txt.gz"), dir / "cut.txt.gz" + ": truncated gzip stream: the file ends at byte 5000"},
  };
  for (const Case& c : cases) {
    const Failed f = fail_run(dir, c.args);
    INFO(f.output);
    CHECK(f.code == 1);
    CHECK(f.output.find(c.message) != std::string::npos);
    CHECK(f.left.empty());
  }
  {
    INFO("a model without a BOS id");
    // A model trained by Python's sentencepiece with bos_id=-1.
    auto py = python_code(dir, "import sentencepiece as spm\nspm.SentencePieceTrainer.train(input=" + q(sample("botchan_head.txt")) +
                                   ", model_prefix=" + q(dir / "nobos") + ", vocab_size=200, bos_id=-1, minloglevel=2)\n");
    REQUIRE(py.exit_code == 0);
    auto r = tokenize("--model " + q(dir / "nobos.model") + " --output-dir " + q(dir / "out") + " " + q(sample("botchan_head.txt")));
    CHECK(r.exit_code == 1);
    CHECK(r.output.find(dir / "nobos.model: the model has no BOS id (bos_id = -1); run with --no-bos") != std::string::npos);
    CHECK(tokenize("--model " + q(dir / "nobos.model") + " --no-bos --output-dir " + q(dir / "out") + " " + q(sample("botchan_head.txt"))).exit_code == 0);
    loom::ShardReader s(dir / "out/botchan_head.bin");
    CHECK(s.header().bos_id == -1);
    CHECK(s.header().flags == loom::kShardFlagEos);
  }
  {
    auto r = tokenize("--model " + q(dir / "t.csv") + " --output-dir " + q(dir / "out") + " " + q(sample("botchan_head.txt")));
    CHECK(r.exit_code == 1);
    CHECK(r.output.find(dir / "t.csv: not a SentencePiece model") != std::string::npos);
  }
  {
    INFO("an HF folder given as --model");
    write_all(dir / "x/tokenizer.model", read_all(internlm_model()));
    auto r = tokenize("--model " + q(dir / "x") + " --output-dir " + q(dir / "out") + " " + q(sample("botchan_head.txt")));
    CHECK(r.exit_code == 1);
    CHECK(r.output.find(dir / "x: a folder, not a tokenizer model file; loom reads a SentencePiece .model file (in a "
                              "Hugging Face folder it is tokenizer.model): give " + dir / "x/tokenizer.model") != std::string::npos);
  }
}

TEST_CASE("bad usage exits 2", "[tokenize][e2e][errors]") {
  TempDir dir("tok_usage");
  const std::string in = q(sample("botchan_head.txt"));
  const std::string m = "--model " + q(internlm_model());
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {m + " --output-dir " + q(dir / "o") + " --colour " + in, "unrecognised option '--colour'"},
      {"--output-dir " + q(dir / "o") + " " + in, "--model is required"},
      {m + " " + in, "--output-dir is required"},
      {m + " --output-dir " + q(dir / "o"), "no INPUT files given"},
      {m + " --output-dir " + q(dir / "o") + " --format hf " + in, "--format: 'hf' is not one of loom, internlm"},
      {m + " --output-dir " + q(dir / "o") + " --bos --no-bos " + in, "--bos and --no-bos contradict each other"},
      {m + " --output-dir " + q(dir / "o") + " --txt-doc page " + in, "--txt-doc: 'page' is not one of line, paragraph, file"},
      {m + " --output-dir " + q(dir / "o") + " --max-doc-bytes 10 " + in, "--max-doc-bytes: '10' is not an integer in [64, 2147483647]"},
      {m + " --output-dir " + q(dir / "o") + " --text-key a..b " + in, "--text-key: 'a..b' is not a dotted key path"},
  };
  for (const Case& c : cases) {
    auto r = tokenize(c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
  write_all(dir / "bad.ini", "[tokenize]\nthreads = 2\n");
  // Each numeric option has its range, checked before any work (and "-1" is not 2^64-1).
  const std::string o = m + " --output-dir " + q(dir / "o") + " ";
  const Case numeric[] = {
      {o + "--threads -1 " + in, "--threads: '-1' is not an integer in [1, 1024]"},
      {o + "--threads 0 " + in, "--threads: '0' is not an integer in [1, 1024]"},
      {o + "--threads 100000 " + in, "--threads: '100000' is not an integer in [1, 1024]"},
      {o + "--threads two " + in, "--threads: 'two' is not an integer in [1, 1024]"},
      {o + "--batch-bytes -1 " + in, "--batch-bytes: '-1' is not an integer in [1, 2147483647]"},
      {o + "--batch-bytes 0 " + in, "--batch-bytes: '0' is not an integer in [1, 2147483647]"},
      {o + "--max-doc-bytes -1 " + in, "--max-doc-bytes: '-1' is not an integer in [64, 2147483647]"},
      {o + "--max-doc-bytes 1e9x " + in, "--max-doc-bytes: '1e9x' is not an integer in [64, 2147483647]"},
      {"train-spm --vocab-size -1 --model-prefix " + q(dir / "m") + " " + in, "--vocab-size: '-1' is not an integer"},
      {"train-spm --vocab-size 100 --threads -1 --model-prefix " + q(dir / "m") + " " + in,
       "--threads: '-1' is not an integer in [1, 1024]"},
      {"train-spm --vocab-size 100 --max-sentence-length -1 --model-prefix " + q(dir / "m") + " " + in,
       "--max-sentence-length: '-1' is not an integer in [64, 2147483647]"},
      {"train-spm --vocab-size 100 --input-sentence-size -1 --model-prefix " + q(dir / "m") + " " + in,
       "--input-sentence-size: '-1' is not an integer"},
      {"train-spm --vocab-size 100 --character-coverage 1.5 --model-prefix " + q(dir / "m") + " " + in,
       "--character-coverage: '1.5' is not a number in [0, 1]"},
      {"train-spm --vocab-size 100 --character-coverage 0 --model-prefix " + q(dir / "m") + " " + in,
       "--character-coverage: '0' covers no character"},
  };
  for (const Case& c : numeric) {
    auto r = tokenize(c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
    CHECK(r.output.find("configuration") == std::string::npos);  // refused before any work
  }
  CHECK(list_dir(dir / "o").empty());
  auto r = tokenize("--config " + q(dir / "bad.ini") + " " + m + " --output-dir " + q(dir / "o") + " " + in);
  CHECK(r.exit_code == 2);
  auto missing = tokenize("--config " + q(dir / "none.ini") + " " + m + " --output-dir " + q(dir / "o") + " " + in);
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("ERROR loom-tokenize: cannot read config file " + dir / "none.ini") != std::string::npos);
  auto spm = tokenize("train-spm --model-prefix " + q(dir / "m") + " " + in);
  CHECK(spm.exit_code == 2);
  CHECK(spm.output.find("ERROR --vocab-size is required") != std::string::npos);
  // Every --help ends with the exit codes every loom tool shares (loom/cli.h).
  for (const std::string help : {"--help", "train-spm --help"}) {
    auto h = tokenize(help);
    INFO(help << "\n" << h.output);
    CHECK(h.exit_code == 0);
    CHECK(h.output.find(help == "--help" ? "--max-doc-bytes" : "--vocab-size") != std::string::npos);
    CHECK(h.output.find("\nExit codes: 0 ok, 1 bad input or failed check, 2 usage error, 3 internal error, 4 hang") !=
          std::string::npos);
  }
  // A boolean default reads true/false, as in loom-train --help and the INI dumps (not Boost's (=1)); a
  // switch shows none.
  auto spm_help = tokenize("train-spm --help").output;
  CHECK(spm_help.find("--byte-fallback arg (=true)") != std::string::npos);
  const std::string main_help = tokenize("--help").output;
  const size_t resume = main_help.find("--resume ");
  REQUIRE(resume != std::string::npos);
  CHECK(main_help.substr(resume, main_help.find('\n', resume) - resume).find("(=") == std::string::npos);
}

TEST_CASE("threads the system refuses end the job cleanly with exit 1", "[tokenize][e2e][errors]") {
  TempDir dir("tok_threads");
  // 400 MB of address space holds a few dozen 8 MB thread stacks, not a thousand.
  auto r = run("ulimit -v 400000; " + quote(LOOM_TOKENIZE_BIN) + " --model " + q(internlm_model()) + " --output-dir " +
               q(dir / "o") + " --threads 1000 " + q(sample("botchan_head.txt")));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("ERROR cannot start 1000 encoder threads (") != std::string::npos);
  CHECK(r.output.find("try a smaller --threads") != std::string::npos);
  CHECK(list_dir(dir / "o").empty());
}
