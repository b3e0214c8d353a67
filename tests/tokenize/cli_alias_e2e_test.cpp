// loom-tokenize under the spellings of Megatron-LM's tools/preprocess_data.py and InternLM's
// tools/tokenizer.py, and folders as inputs: each run is compared byte for byte with the same job in
// loom's own spelling, and the InternLM one also with the tools/tokenizer.py reference.
#include <catch2/catch.hpp>

#include "run_checks.h"
#include "tok_test_util.h"

using namespace loom::test;

namespace {
std::string q(const std::string& s) { return quote(s); }

// data/: two inputs at two depths, plus files the walk must skip.
void make_tree(const TempDir& dir) {
  run("mkdir -p " + q(dir / "data/sub/deeper"));
  write_all(dir / "data/a.jsonl",
            "{\"text\": \"The cat sat on the mat.\", \"title\": \"Cats\"}\n"
            "{\"text\": \"A second document, longer than the first one.\", \"title\": \"Second\"}\n");
  write_all(dir / "data/sub/deeper/b.jsonl",
            "{\"title\": \"Zwei\", \"text\": \"吾輩は猫である。名前はまだ無い。\"}\n"
            "{\"title\": \"Drei\", \"text\": \"Third: numbers 12345 and symbols (#!).\"}\n");
  run("gzip " + q(dir / "data/sub/deeper/b.jsonl"));
  write_all(dir / "data/sub/notes.md", "not an input\n");
  write_all(dir / "data/sub/b.csv", "x,y\n");
}
}  // namespace

TEST_CASE("Megatron's preprocess_data.py spellings write what loom's own spellings write", "[tokenize][e2e]") {
  TempDir dir("tok_alias_megatron");
  make_tree(dir);
  const std::string m = q(sample("spm_2k.model"));
  // The folder is walked: a.jsonl and sub/deeper/b.jsonl.gz, the .md and .csv skipped.
  const RunResult mega = tokenize("--tokenizer-model " + m + " --input " + q(dir / "data") + " --output-prefix " +
                                  q(dir / "mega/corpus") + " --json-keys text title --workers 2 --append-eod 2>&1");
  INFO(mega.output);
  REQUIRE(mega.exit_code == 0);
  CHECK_THAT(mega.output, Catch::Contains("2 inputs, 2 other files skipped"));
  CHECK(list_dir(dir / "mega") == "corpus_text_document\ncorpus_title_document\n");
  const std::string files = "a.bin\na.bin.meta\nb.bin\nb.bin.meta\n";
  CHECK(list_dir(dir / "mega/corpus_text_document") == files);
  CHECK(list_dir(dir / "mega/corpus_title_document") == files);
  const std::string inputs = q(dir / "data/a.jsonl") + " " + q(dir / "data/sub/deeper/b.jsonl.gz");
  for (const std::string key : {"text", "title"}) {
    require_ok(tokenize("--model " + m + " --output-dir " + q(dir / ("loom/" + key)) + " --text-key " + key +
                        " --threads 2 --eos " + inputs + " 2>&1"));
    for (const std::string f : {"a.bin", "a.bin.meta", "b.bin", "b.bin.meta"})
      require_same_file(dir / ("mega/corpus_" + key + "_document/" + f), dir / ("loom/" + key + "/" + f));
  }
  // The two keys gave different shards (the title job really read the titles).
  CHECK(read_all(dir / "loom/text/a.bin") != read_all(dir / "loom/title/a.bin"));
}

TEST_CASE("InternLM's tools/tokenizer.py spellings write its output byte for byte", "[tokenize][e2e]") {
  TempDir dir("tok_alias_internlm");
  const std::string m = q(internlm_model());
  struct Case {
    std::string input, ref_flags;
  };
  // tools/tokenizer.py: txt lines stripped; a json/jsonl record encoded whole; BOS, no EOS.
  const Case cases[] = {{sample("botchan_head.txt"), ""}, {sample("neko_head.jsonl.gz"), "--raw-records"}};
  for (const Case& c : cases) {
    SECTION(c.input) {
      require_ok(tokenize("--model " + m + " --text_input_path " + q(c.input) + " --bin_output_path " +
                          q(dir / "out/cn/train.bin") + " 2>&1"));
      require_ok(run(reference_py() + " internlm " + m + " " + q(c.input) + " " + q(dir / "ref.bin") + " " + c.ref_flags));
      require_same_file(dir / "out/cn/train.bin", dir / "ref.bin");
      require_same_file(dir / "out/cn/train.bin.meta", dir / "ref.bin.meta");
      // (.loom-settings: what --resume compares, docs/FORMAT.md)
      CHECK(list_dir(dir / "out/cn") == "train.bin\ntrain.bin.loom-settings\ntrain.bin.meta\n");
    }
  }
  SECTION("the dashed spelling and loom's own options are the same job") {
    require_ok(tokenize("--model " + m + " --text-input-path " + q(sample("neko_head.jsonl.gz")) + " --bin-output-path " +
                        q(dir / "a/x.bin") + " 2>&1"));
    require_ok(tokenize("--model " + m + " --format internlm --raw-records --output-dir " + q(dir / "b") + " " +
                        q(sample("neko_head.jsonl.gz")) + " 2>&1"));
    require_same_file(dir / "a/x.bin", dir / "b/neko_head.bin");
    require_same_file(dir / "a/x.bin.meta", dir / "b/neko_head.bin.meta");
  }
}

TEST_CASE("alias misuse is a usage error that says what to give", "[tokenize][e2e]") {
  TempDir dir("tok_alias_bad");
  make_tree(dir);
  const std::string m = q(sample("spm_2k.model"));
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--input " + q(dir / "data") + " --bin_output_path " + q(dir / "o.bin"),
       "--bin_output_path names one output file; 2 inputs given"},
      {"--input " + q(dir / "data") + " --output-dir " + q(dir / "o") + " --json-keys text title",
       "--json-keys with several keys writes one shard set per key: give --output-prefix"},
      {"--input " + q(dir / "data") + " --output-dir " + q(dir / "o") + " --output-prefix " + q(dir / "p"),
       "give one of --output-dir, --output-prefix and --bin_output_path"},
      {"--input " + q(dir / "data") + " --ouput-prefix " + q(dir / "p"), "(did you mean '--output-prefix'?)"},
  };
  for (const Case& c : cases) {
    const RunResult r = tokenize("--model " + m + " " + c.args + " 2>&1");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(c.message));
  }
  // A folder with nothing to tokenize names itself and what it expected (bad input: exit 1).
  run("mkdir -p " + q(dir / "empty") + " && touch " + q(dir / "empty/readme.md"));
  const RunResult r = tokenize("--model " + m + " --output-dir " + q(dir / "o") + " " + q(dir / "empty") + " 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains(dir / "empty") && Catch::Contains("a folder with no input in it") &&
                           Catch::Contains("1 other files"));
}
