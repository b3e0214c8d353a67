// What loom-tokenize tells its user: --version, counts written one way (thousands separators, a
// singular for 1) with the token count checked against Debian's sentencepiece, the threads' timings
// only at --verbose, and what documents get in Megatron-LM's format (the tokenizer type's BOS).
#include <catch2/catch.hpp>

#include <regex>

#include "run_checks.h"
#include "tok_test_util.h"

using namespace loom::test;
using Catch::Contains;

namespace {
std::string q(const std::string& s) { return quote(s); }

// n with thousands separators, as Python's f"{n:,}" writes it.
std::string python_grouped(const TempDir& dir, const std::string& expr) {
  const RunResult r = python_code(dir, "n = " + expr + "\nprint(f'{n:,}', end='')");
  REQUIRE(r.exit_code == 0);
  return r.output;
}
}  // namespace

TEST_CASE("loom-tokenize --version names the version, the commit and the build type", "[tokenize][e2e]") {
  const RunResult r = run(quote(LOOM_TOKENIZE_BIN) + " --version");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // The version of project() in the top CMakeLists.txt.
  std::smatch m;
  const std::string top = read_all(source_dir() + "/CMakeLists.txt");
  REQUIRE(std::regex_search(top, m, std::regex("project\\(loom VERSION ([0-9.]+)")));
  CHECK(r.output.rfind("loom-tokenize " + m[1].str() + "\ncommit: ", 0) == 0);
  CHECK_THAT(r.output, Contains("\nbuild type: "));
}

TEST_CASE("loom-tokenize writes counts with separators and singulars, timings at --verbose", "[tokenize][e2e]") {
  TempDir dir("tok_cli_output");
  // One document (--txt-doc file: the file's text, stripped) of thousands of tokens: BOS + ids + EOS.
  const std::string text = read_all(sample("botchan_head.txt"));
  write_all(dir / "one.txt", text);
  const std::string model = sample("spm_2k.model");
  const std::string tokens = python_grouped(
      dir, "len(__import__('sentencepiece').SentencePieceProcessor(model_file=" + std::string("'") + model +
               "').encode(open('" + (dir / "one.txt") + "', encoding='utf-8').read().strip())) + 2");
  REQUIRE(tokens.find(',') != std::string::npos);  // the sample is long enough to need a separator
  const std::string args = "--model " + q(model) + " --txt-doc file --threads 1 " + q(dir / "one.txt") + " 2>&1";

  const RunResult quiet = tokenize("--output-dir " + q(dir / "a") + " " + args);
  INFO(quiet.output);
  REQUIRE(quiet.exit_code == 0);
  CHECK_THAT(quiet.output, Contains("one.bin: 1 doc, " + tokens + " tokens\n"));
  CHECK_THAT(quiet.output, Contains("summary: 1 file written, 1 doc, " + tokens + " tokens, "));
  CHECK_THAT(quiet.output, Contains("; skipped 0 bad records, 0 empty texts"));
  CHECK_THAT(quiet.output, !Contains("CPU seconds of the threads") && !Contains("s in the pipeline"));

  const RunResult verbose = tokenize("--verbose --output-dir " + q(dir / "b") + " " + args);
  INFO(verbose.output);
  REQUIRE(verbose.exit_code == 0);
  CHECK_THAT(verbose.output, Contains("one.txt: CPU seconds of the threads: reading "));
  CHECK_THAT(verbose.output, Contains(" (1 thread)\n"));
  CHECK_THAT(verbose.output, Contains(" s in the pipeline: first batch encoded at "));
  require_same_file(dir / "a/one.bin", dir / "b/one.bin");  // only the log differs
}

TEST_CASE("Megatron's format says what documents get as the tokenizer type decides", "[tokenize][e2e]") {
  TempDir dir("tok_cli_megatron_bos");
  write_all(dir / "in.json", "{\"text\": \"The cat sat on the mat.\"}\n{\"text\": \"A second document.\"}\n");
  const std::string common = "--tokenizer-model " + q(sample("spm_2k.model")) + " --input " + q(dir / "in.json") +
                             " --workers 1 --output-prefix ";
  const RunResult llama = tokenize(common + q(dir / "llama") + " --tokenizer-type Llama2Tokenizer --append-eod 2>&1");
  INFO(llama.output);
  REQUIRE(llama.exit_code == 0);
  CHECK_THAT(llama.output, Contains("documents get: BOS yes (Llama2Tokenizer), EOS yes; 1 input\n"));
  CHECK_THAT(llama.output, Contains(" before every document"));
  // The dataset agrees: every sequence starts with the model's bos (1), numpy reading the .bin.
  const RunResult first = python_code(
      dir, "import numpy as np\nb = np.fromfile('" + (dir / "llama_text_document.bin") + "', dtype=np.uint16)\n"
           "print(int(b[0]), end='')");
  CHECK(first.output == "1");
  const RunResult gpt = tokenize(common + q(dir / "gpt") + " --tokenizer-type GPTSentencePieceTokenizer 2>&1");
  INFO(gpt.output);
  REQUIRE(gpt.exit_code == 0);
  CHECK_THAT(gpt.output, Contains("documents get: BOS no (GPTSentencePieceTokenizer), EOS no; 1 input\n"));
}
