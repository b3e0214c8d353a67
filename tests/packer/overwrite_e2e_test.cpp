// Every loom-pack command that writes refuses an output that is one of its inputs (the same file:
// the same path, a hard link, or through a symlink), naming both, before anything is written: the
// input's bytes stay as they were.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "fixtures.h"
#include "loom/sys.h"

using namespace loom;
using namespace loom::test;

namespace {

const TokenizerInfo kInfo{500, 1, 2, 0, 0x77};

// The bytes of a shard's two files, to compare after a refused run.
std::string shard_bytes(const std::string& bin) { return read_all(bin) + "|" + read_all(meta_path_for(bin)); }

// `loom-pack ARGS` must fail with exit 1 and a message that names `input` and `output`, leaving
// the shard `shard` (its .bin and .meta) unchanged.
void require_refused(const std::string& args, const std::string& input, const std::string& output, const std::string& shard) {
  const std::string before = shard_bytes(shard);
  const RunResult r = loom_pack(args);
  INFO(args << "\n" << r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains(input) && Catch::Contains(output));
  CHECK(shard_bytes(shard) == before);
}

void hard_link(const std::string& from, const std::string& to) {
  sys::make_dirs(sys::dirname(to));
  REQUIRE(::link(from.c_str(), to.c_str()) == 0);
}
void sym_link(const std::string& target, const std::string& at) {
  sys::make_dirs(sys::dirname(at));
  REQUIRE(::symlink(target.c_str(), at.c_str()) == 0);
}

}  // namespace

TEST_CASE("merge refuses an output that is one of its inputs", "[overwrite]") {
  TempDir dir("overwrite_merge");
  write_shard(dir / "a.bin", {{1, 2}, {3}}, kInfo);
  write_shard(dir / "b.bin", {{4}}, kInfo);
  const std::string inputs = " " + quote(dir / "a.bin") + " " + quote(dir / "b.bin");
  SECTION("the same path") {
    require_refused("merge --output " + quote(dir / "a.bin") + inputs, "the input " + dir / "a.bin",
                    "the output " + dir / "a.bin", dir / "a.bin");
  }
  SECTION("another spelling of an input's .meta's folder") {
    require_refused("merge --output " + quote(dir / "sub/../b.bin") + inputs, dir / "b.bin", dir / "sub/../b.bin",
                    dir / "b.bin");
  }
  SECTION("a hard link of an input") {
    hard_link(dir / "b.bin", dir / "out/m.bin");
    require_refused("merge --output " + quote(dir / "out/m.bin") + inputs, dir / "b.bin", dir / "out/m.bin", dir / "b.bin");
  }
  SECTION("an input given as a folder, the output inside it") {
    require_refused("merge --output " + quote(dir / "a.bin") + " " + quote(dir.path()), dir / "a.bin", dir / "a.bin",
                    dir / "a.bin");
  }
  CHECK_FALSE(sys::exists(dir / "a.bin.tmp"));
}

TEST_CASE("split refuses an output folder whose train or valid side would replace an input", "[overwrite]") {
  TempDir dir("overwrite_split");
  // The output of an earlier split, split again into the same folder.
  write_shard(dir / "out/train/a.bin", {{1}, {2}, {3}, {4}}, kInfo);
  require_refused("split --valid-docs 1 --output-dir " + quote(dir / "out") + " " + quote(dir / "out/train/a.bin"),
                  "the input " + dir / "out/train/a.bin", "the output " + dir / "out/train/a.bin", dir / "out/train/a.bin");
  // The valid side, through a symlinked input: out/valid/a.bin is the file the symlink names.
  write_shard(dir / "out/valid/a.bin", {{5}, {6}}, kInfo);
  sym_link(dir / "out/valid/a.bin", dir / "in/a.bin");
  sym_link(dir / "out/valid/a.bin.meta", dir / "in/a.bin.meta");
  require_refused("split --valid-docs 0 --output-dir " + quote(dir / "out") + " " + quote(dir / "in/a.bin"), dir / "in/a.bin",
                  dir / "out/valid/a.bin", dir / "out/valid/a.bin");
}

TEST_CASE("convert refuses an output folder that holds its inputs", "[overwrite]") {
  TempDir dir("overwrite_convert");
  write_shard(dir / "a.bin", {{1, 2}, {3}}, kInfo);
  require_refused("convert --to internlm --output-dir " + quote(dir.path()) + " " + quote(dir / "a.bin"),
                  "the input " + dir / "a.bin", "the output " + dir / "a.bin", dir / "a.bin");
  // The .meta alone: DIR/a.bin.meta is a hard link of the input's .meta.
  hard_link(dir / "a.bin.meta", dir / "out/a.bin.meta");
  require_refused("convert --to internlm --output-dir " + quote(dir / "out") + " " + quote(dir / "a.bin"),
                  dir / "a.bin.meta", dir / "out/a.bin.meta", dir / "a.bin");
  CHECK_FALSE(sys::exists(dir / "out/a.bin"));
}

TEST_CASE("pack refuses outputs of any roll number that are inputs, and reads inputs in sub-folders of its output", "[overwrite]") {
  TempDir dir("overwrite_pack");
  write_shard(dir / "out/packed.bin", {{1, 2, 3}, {4, 5}}, kInfo);
  require_refused("pack --seq-len 4 --output-dir " + quote(dir / "out") + " " + quote(dir / "out/packed.bin"),
                  "the input " + dir / "out/packed.bin", "the output " + dir / "out/packed.bin", dir / "out/packed.bin");
  // Rolled outputs: NAME-00003.bin would be written only by a run of 4+ files, yet it is refused
  // before the plan is known.
  write_shard(dir / "out/p-00003.bin", {{1, 2, 3}, {4, 5}}, kInfo);
  require_refused("pack --seq-len 4 --name p --max-packs-per-shard 1 --output-dir " + quote(dir / "out") + " " +
                      quote(dir / "out/p-00003.bin"),
                  dir / "out/p-00003.bin", dir / "out/p-00003.bin", dir / "out/p-00003.bin");
  // An input in a sub-folder of the output folder is read, never removed (pack's scratch folder is
  // one it makes fresh, output_set_test.cpp).
  write_shard(dir / "out/.internlm-as-loom/s.bin", {{7, 8}}, kInfo);
  const std::string scratch_input = shard_bytes(dir / "out/.internlm-as-loom/s.bin");
  CHECK(loom_pack("pack --seq-len 4 --name sub --output-dir " + quote(dir / "out") + " " + quote(dir / "out/.internlm-as-loom/s.bin"))
            .exit_code == 0);
  CHECK(shard_bytes(dir / "out/.internlm-as-loom/s.bin") == scratch_input);
  // The same inputs into another folder pack fine.
  const RunResult ok = loom_pack("pack --seq-len 4 --output-dir " + quote(dir / "fine") + " " + quote(dir / "out/packed.bin"));
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
}
