// loom-tokenize refuses a run whose output is one of its inputs (the same path, a hard link, or
// through a symlink; the .bin, its .meta, InternLM's .loom-settings, and the model), naming both,
// before anything is written: the input's bytes stay as they were.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "loom/sys.h"
#include "tok_test_util.h"

using namespace loom::test;

namespace {

std::string q(const std::string& s) { return quote(s); }

// `loom-tokenize ARGS` must fail with exit 1, naming `input` and `output`, and leave `kept` as it was.
void require_refused(const std::string& args, const std::string& input, const std::string& output, const std::string& kept) {
  const std::string before = read_all(kept);
  const RunResult r = tokenize(args + " 2>&1");
  INFO(args << "\n" << r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("the input " + input) && Catch::Contains("the output " + output));
  CHECK(read_all(kept) == before);
}

void hard_link(const std::string& from, const std::string& to) {
  loom::sys::make_dirs(loom::sys::dirname(to));
  REQUIRE(::link(from.c_str(), to.c_str()) == 0);
}

}  // namespace

TEST_CASE("loom-tokenize refuses an output that is one of its inputs", "[tokenize][e2e][overwrite]") {
  TempDir dir("tok_overwrite");
  const std::string m = "--model " + q(internlm_model()) + " ";
  const std::string in = dir / "a.jsonl";
  write_all(in, "{\"text\": \"hello world\"}\n{\"text\": \"again\"}\n");
  SECTION("--bin_output_path names the input") {
    require_refused(m + "--bin_output_path " + q(in) + " " + q(in), in, in, in);
  }
  SECTION("--bin_output_path names a hard link of the input") {
    hard_link(in, dir / "out/a.bin");
    require_refused(m + "--bin_output_path " + q(dir / "out/a.bin") + " " + q(in), in, dir / "out/a.bin", in);
  }
  SECTION("the input is a symlink to the output") {
    REQUIRE(::symlink(in.c_str(), (dir / "s.jsonl").c_str()) == 0);
    require_refused(m + "--bin_output_path " + q(in) + " " + q(dir / "s.jsonl"), dir / "s.jsonl", in, in);
  }
  SECTION("an output not made yet, through a folder the run would make") {
    require_refused(m + "--bin_output_path " + q(dir / "new/../a.jsonl") + " " + q(in), in, dir / "new/../a.jsonl", in);
    CHECK_FALSE(loom::sys::exists(dir / "new"));
  }
  SECTION("the .meta of --output-dir's shard") {
    hard_link(in, dir / "out/a.bin.meta");
    require_refused(m + "--output-dir " + q(dir / "out") + " " + q(in), in, dir / "out/a.bin.meta", in);
    CHECK_FALSE(loom::sys::exists(dir / "out/a.bin"));
  }
  SECTION("InternLM's .loom-settings record") {
    hard_link(in, dir / "out/a.bin.loom-settings");
    require_refused(m + "--format internlm --output-dir " + q(dir / "out") + " " + q(in), in,
                    dir / "out/a.bin.loom-settings", in);
  }
  SECTION("the model") {
    const std::string model = dir / "m.model";
    write_all(model, read_all(internlm_model()));
    require_refused("--model " + q(model) + " --bin_output_path " + q(dir / "m.model.meta/../m.model") + " " + q(in), model,
                    dir / "m.model.meta/../m.model", model);
  }
  SECTION("a later --json-keys job: refused before the first one writes") {
    hard_link(in, dir / "p_title_document/a.bin");
    require_refused(m + "--output-prefix " + q(dir / "p") + " --input " + q(in) + " --json-keys text title", in,
                    dir / "p_title_document/a.bin", in);
    CHECK_FALSE(loom::sys::exists(dir / "p_text_document/a.bin"));
  }
}

TEST_CASE("train-spm refuses a model prefix whose files are inputs", "[tokenize][e2e][overwrite]") {
  TempDir dir("tok_overwrite_spm");
  const std::string in = dir / "a.txt";
  write_all(in, "hello world\nagain\n");
  hard_link(in, dir / "p.model");
  require_refused("train-spm --vocab-size 40 --model-prefix " + q(dir / "p") + " " + q(in), in, dir / "p.model", in);
  REQUIRE(::symlink(in.c_str(), (dir / "q.train.log").c_str()) == 0);
  require_refused("train-spm --vocab-size 40 --model-prefix " + q(dir / "q") + " " + q(in), in, dir / "q.train.log", in);
}
