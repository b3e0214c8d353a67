// What `loom-pack pack` owns in its output folder, and nothing more: a scratch folder it makes
// fresh (never an existing path, never through a link) and removes with only its own files, and
// an output set (NAME.bin, or NAME-NNNNN.bin rolled) that replaces the previous set of that NAME
// as a whole, each file's header naming its set (set_id, shard_index, shard_count), read here by
// numpy.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "fixtures.h"
#include "loom/error.h"
#include "loom/sys.h"
#include "run_checks.h"

using namespace loom;
using namespace loom::test;

namespace {

const TokenizerInfo kInfo{500, 1, 2, 0, 0x77};

// Header bytes 112..127 of each packed shard, by numpy: "set_id shard_index shard_count" per line.
std::string set_fields(const std::vector<std::string>& bins) {
  std::string args;
  for (const std::string& b : bins) args += " " + quote(b);
  const RunResult r = run(python() +
                          " -c \"import sys, numpy as np\n"
                          "for b in sys.argv[1:]:\n"
                          "    h = np.fromfile(b + '.meta', dtype=np.uint8, count=128)\n"
                          "    print(int(h[112:120].view('<u8')[0]), int(h[120:124].view('<u4')[0]), int(h[124:128].view('<u4')[0]))\n"
                          "\"" + args);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// write_all, the folders made first.
void put(const std::string& path, const std::string& data) {
  sys::make_dirs(sys::dirname(path));
  write_all(path, data);
}

// A folder's entries, dot files included, one a line.
std::string ls(const std::string& dir) { return run("ls -A " + quote(dir)).output; }

}  // namespace

TEST_CASE("pack never empties a scratch folder it did not make, nor follows a link there", "[pack][scratch]") {
  TempDir dir("output_set_scratch");
  write_shard(dir / "in/a.bin", {{3, 4, 5}, {6, 7}}, kInfo);
  // A folder of the user's, reached through a link named as pack's scratch folder once was.
  put(dir / "victim/keep.txt", "mine");
  put(dir / "victim/sub/deep.txt", "mine too");
  sys::make_dirs(dir / "linked");
  REQUIRE(::symlink((dir / "victim").c_str(), (dir / "linked/.internlm-as-loom").c_str()) == 0);
  // A real folder of that name holding the user's files.
  put(dir / "real/.internlm-as-loom/notes.txt", "user data");
  for (const std::string out : {"linked", "real"}) {
    const RunResult r = loom_pack("pack --seq-len 4 --output-dir " + quote(dir / out) + " " + quote(dir / "in/a.bin") + " 2>&1");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, !Catch::Contains("could not remove"));
  }
  CHECK(read_all(dir / "victim/keep.txt") == "mine");
  CHECK(read_all(dir / "victim/sub/deep.txt") == "mine too");
  CHECK(read_all(dir / "real/.internlm-as-loom/notes.txt") == "user data");
  CHECK(ls(dir / "linked") == ".internlm-as-loom\npacked.bin\npacked.bin.meta\n");

  // InternLM inputs are converted in a folder of the run's own, removed afterwards; the user's
  // folder of the old name stays as it was.
  require_ok(loom_pack("convert --to internlm --output-dir " + quote(dir / "internlm") + " " + quote(dir / "in") + " 2>&1"));
  const RunResult r = loom_pack("pack --seq-len 4 --vocab-size 500 --output-dir " + quote(dir / "real") + " " +
                                quote(dir / "internlm/a.bin") + " 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("1 InternLM shard(s) read through their loom conversion"));
  CHECK(ls(dir / "real") == ".internlm-as-loom\npacked.bin\npacked.bin.meta\n");
  CHECK(ls(dir / "real/.internlm-as-loom") == "notes.txt\n");
  CHECK(read_all(dir / "real/.internlm-as-loom/notes.txt") == "user data");
}

TEST_CASE("a pack replaces the previous output set of its NAME as a whole", "[pack][output-set]") {
  TempDir dir("output_set_replace");
  Docs docs;
  for (uint32_t d = 0; d < 40; ++d) docs.push_back(std::vector<uint32_t>(5 + d % 7, 10 + d));
  write_shard(dir / "in/a.bin", docs, kInfo);
  const std::string in = " " + quote(dir / "in/a.bin");
  // Another NAME's file in the folder: not part of the set, never touched.
  put(dir / "out/other-00001.bin", "not mine");
  require_ok(loom_pack("pack --seq-len 16 --max-packs-per-shard 4 --output-dir " + quote(dir / "out") + in + " 2>&1"));
  const std::string rolled = ls(dir / "out");
  CHECK(rolled.find("packed-00003.bin.meta\n") != std::string::npos);
  CHECK(rolled.find("packed.bin") == std::string::npos);

  // Every file of the set names it: one set_id (not 0), its index, the count.
  std::vector<std::string> bins;
  for (const std::string& f : sys::list_dir(dir / "out"))
    if (f.rfind("packed-", 0) == 0 && f.size() > 4 && f.compare(f.size() - 4, 4, ".bin") == 0) bins.push_back(dir / ("out/" + f));
  REQUIRE(bins.size() >= 4);
  const std::string fields = set_fields(bins);
  unsigned long long set_id = 0;
  REQUIRE(std::sscanf(fields.c_str(), "%llu", &set_id) == 1);
  CHECK(set_id != 0);
  std::string want;
  for (size_t i = 0; i < bins.size(); ++i) want += str(set_id, " ", i, " ", bins.size(), "\n");
  CHECK(fields == want);

  // The same run again: the same bytes (a rerun is idempotent).
  const std::string first = read_all(bins[1]) + read_all(bins[1] + ".meta");
  require_ok(loom_pack("pack --seq-len 16 --max-packs-per-shard 4 --output-dir " + quote(dir / "out") + in + " 2>&1"));
  CHECK(read_all(bins[1]) + read_all(bins[1] + ".meta") == first);
  CHECK(ls(dir / "out") == rolled);

  // Without rolling: packed.bin replaces the rolled set, nothing of it is left beside it.
  require_ok(loom_pack("pack --seq-len 16 --output-dir " + quote(dir / "out") + in + " 2>&1"));
  CHECK(ls(dir / "out") == "other-00001.bin\npacked.bin\npacked.bin.meta\n");
  CHECK(read_all(dir / "out/other-00001.bin") == "not mine");
  const std::string one = set_fields({dir / "out/packed.bin"});
  CHECK(one.find(" 0 1\n") != std::string::npos);
  CHECK(one.rfind("0 ", 0) != 0);
  const RunResult stats = loom_pack("stats " + quote(dir / "out/packed.bin") + " 2>&1");
  INFO(stats.output);
  CHECK(stats.exit_code == 0);
  CHECK_THAT(stats.output, Catch::Contains("40"));

  // And back to a rolled set: packed.bin goes.
  require_ok(loom_pack("pack --seq-len 16 --max-packs-per-shard 4 --output-dir " + quote(dir / "out") + in + " 2>&1"));
  CHECK(ls(dir / "out") == rolled);
}
