// `loom-pack pack` end to end on botchan.txt tokenized with internlm_v7.model, split over two
// input shards; the packed shards are checked by check_packed.py (numpy, xxhash).
#include <catch2/catch.hpp>

#include <cstdio>

#include "fixtures.h"
#include "loom/error.h"
#include "loom/progress.h"

using namespace loom;
using namespace loom::test;

namespace {

// botchan split in two shards (global document ids must run across inputs).
void write_botchan_inputs(const std::string& dir) {
  const Docs& all = botchan_docs();
  REQUIRE(all.size() > 100);
  const auto half = static_cast<std::ptrdiff_t>(all.size() / 2);
  run("mkdir -p " + quote(dir));
  write_shard(dir + "/a.bin", Docs(all.begin(), all.begin() + half), internlm_info());
  write_shard(dir + "/b.bin", Docs(all.begin() + half, all.end()), internlm_info());
}

RunResult check_packed(const std::string& strategy, const std::string& source_dir, const std::string& packed) {
  return run(python() + " " + quote(test::source_dir() + "/tests/packer/check_packed.py") + " " + strategy + " " +
             quote(source_dir) + " " + packed);
}

// The one way figures for people show a fraction (3 significant digits: "0.044%").
std::string fraction_text(uint64_t num, uint64_t den) {
  return loom::format_percent(static_cast<double>(num), static_cast<double>(den));
}

}  // namespace

TEST_CASE("pack concat keeps every botchan token once and in order, cut every L") {
  TempDir dir("pack");
  write_botchan_inputs(dir / "in");
  const uint32_t L = 512;
  RunResult r = loom_pack("pack --seq-len 512 --strategy concat --output-dir " + quote(dir / "out") + " " +
                          quote(dir / "in"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // Expected figures, computed here from the documents.
  const Docs& docs = botchan_docs();
  uint64_t tokens = 0, truncated = 0, segments = 0;
  for (const auto& d : docs) {
    const uint64_t cuts = d.empty() ? 0 : (tokens + d.size() - 1) / L - tokens / L;  // pack boundaries inside d
    truncated += cuts > 0;
    segments += d.empty() ? 0 : 1 + cuts;
    tokens += d.size();
  }
  const uint64_t packs = (tokens + L - 1) / L;
  RunResult c = check_packed("concat", dir / "in", quote(dir / "out/packed.bin"));
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  CHECK(c.output == str("packs=", packs, " segments=", segments, " tokens=", tokens, " padding=", packs * L - tokens,
                        " truncated=", truncated, "\n"));
  CHECK_THAT(r.output, Catch::Contains(str("padding ", fraction_text(packs * L - tokens, packs * L), ", truncated documents ",
                                           fraction_text(truncated, docs.size()), " (", loom::format_count(truncated), " of ",
                                           loom::format_count(static_cast<uint64_t>(docs.size())), " non-empty documents)")));
  CHECK(loom_pack("verify --deep " + quote(dir / "out")).exit_code == 0);
}

TEST_CASE("pack bestfit keeps every token once, splits no document shorter than L, and is deterministic") {
  TempDir dir("pack");
  write_botchan_inputs(dir / "in");
  const uint32_t L = 256;
  const std::string args = "pack --seq-len 256 --strategy bestfit --seed 11 --max-packs-per-shard 100 " + quote(dir / "in");
  RunResult r = loom_pack(args + " --output-dir " + quote(dir / "out"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const Docs& docs = botchan_docs();
  uint64_t tokens = 0, truncated = 0;
  for (const auto& d : docs) tokens += d.size(), truncated += d.size() > L;
  RunResult c = check_packed("bestfit", dir / "in", quote(dir / "out") + "/packed-*.bin");
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  unsigned long long packs = 0, segments = 0;
  REQUIRE(std::sscanf(c.output.c_str(), "packs=%llu segments=%llu", &packs, &segments) == 2);
  CHECK_THAT(c.output, Catch::EndsWith(str(" tokens=", tokens, " padding=", packs * L - tokens, " truncated=", truncated, "\n")));
  CHECK(packs >= (tokens + L - 1) / L);
  CHECK_THAT(r.output, Catch::Contains(str(loom::format_count(packs), " packs in ", (packs + 99) / 100, " files")));
  CHECK_THAT(r.output, Catch::Contains(str("padding ", fraction_text(packs * L - tokens, packs * L), ", truncated documents ",
                                           fraction_text(truncated, docs.size()))));
  CHECK(loom_pack("verify --deep " + quote(dir / "out")).exit_code == 0);

  // Same seed: byte-identical (and a rerun into the same folder is idempotent); another seed: another order.
  REQUIRE(loom_pack(args + " --output-dir " + quote(dir / "again")).exit_code == 0);
  REQUIRE(loom_pack(args + " --output-dir " + quote(dir / "out")).exit_code == 0);
  CHECK(read_all(dir / "again/packed-00000.bin") == read_all(dir / "out/packed-00000.bin"));
  CHECK(read_all(dir / "again/packed-00001.bin.meta") == read_all(dir / "out/packed-00001.bin.meta"));
  CHECK(run("ls " + quote(dir / "out")).output == run("ls " + quote(dir / "again")).output);
  REQUIRE(loom_pack("pack --seq-len 256 --strategy bestfit --seed 12 --max-packs-per-shard 100 --output-dir " +
                    quote(dir / "other") + " " + quote(dir / "in"))
              .exit_code == 0);
  CHECK(read_all(dir / "other/packed-00000.bin") != read_all(dir / "out/packed-00000.bin"));
}

TEST_CASE("pack bestfit writes the same bytes on any number of threads, in one file and in many") {
  // ~4.5M tokens of 1-60 token documents: at L = 64 about 70k packs, 9 batches of ~1 MiB, so the
  // gatherers (threads - 3 of them, at least 1) and the writer all run on several batches,
  // whatever the machine's cores.
  TempDir dir("pack_threads");
  Docs docs(150000);
  uint64_t x = 12345;
  for (auto& d : docs) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    d.resize(1 + (x >> 33) % 60);
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint32_t>((x >> 20) + i * 7) % 1000;
  }
  write_shard(dir / "in.bin", docs, TokenizerInfo{1000, -1, -1, 0, 0});
  for (const std::string roll : {"0", "20000"}) {
    const std::string args = "pack --seq-len 64 --strategy bestfit --seed 5 --max-packs-per-shard " + roll + " " + quote(dir / "in.bin");
    REQUIRE(loom_pack(args + " --threads 1 --output-dir " + quote(dir / ("t1-" + roll))).exit_code == 0);
    CHECK(loom_pack("verify --deep " + quote(dir / ("t1-" + roll))).exit_code == 0);
    for (const std::string threads : {"2", "4", "9"}) {
      const std::string out = dir / ("t" + threads + "-" + roll);
      RunResult r = loom_pack(args + " --threads " + threads + " --output-dir " + quote(out));
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK(run("diff -r " + quote(dir / ("t1-" + roll)) + " " + quote(out)).exit_code == 0);
    }
  }
  CHECK(run("ls " + quote(dir / "t9-20000")).output == "packed-00000.bin\npacked-00000.bin.meta\npacked-00001.bin\n"
        "packed-00001.bin.meta\npacked-00002.bin\npacked-00002.bin.meta\npacked-00003.bin\npacked-00003.bin.meta\n");
}

TEST_CASE("pack into hundreds of files keeps no buffer per sealed file") {
  // Outputs are sealed as they fill and published at the end: each sealed file used to keep its
  // two 1 MiB write buffers: 626 MB of address space for these 313 files, over the limit here.
  TempDir dir("pack_many");
  Docs docs(4000);
  for (size_t i = 0; i < docs.size(); ++i) docs[i].assign(1 + i % 19, static_cast<uint32_t>(i % 1000));
  write_shard(dir / "in.bin", docs, TokenizerInfo{1000, -1, -1, 0, 0});  // 39,955 tokens
  for (const std::string strategy : {"bestfit", "concat"}) {
    RunResult r = run("ulimit -v 400000 && " + std::string(LOOM_PACK_BIN) + " pack --seq-len 1 --max-packs-per-shard 128 --strategy " +
                      strategy + " --output-dir " + quote(dir / strategy) + " " + quote(dir / "in.bin"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("39,955 packs in 313 files"));
  }
}

TEST_CASE("pack refuses bad usage and packed inputs") {
  TempDir dir("pack");
  write_shard(dir / "a.bin", {{1, 2, 3}}, TokenizerInfo{10, -1, -1, 0, 0});
  CHECK(loom_pack("pack --seq-len 0 --output-dir " + quote(dir / "o") + " " + quote(dir / "a.bin")).exit_code == 2);
  CHECK(loom_pack("pack --seq-len 4 --strategy greedy --output-dir " + quote(dir / "o") + " " + quote(dir / "a.bin")).exit_code == 2);
  CHECK(loom_pack("pack --output-dir " + quote(dir / "o") + " " + quote(dir / "a.bin")).exit_code == 2);
  // InternLM shards are inputs too (pack_internlm_e2e_test.cpp); packed ones are not.
  REQUIRE(loom_pack("pack --seq-len 4 --output-dir " + quote(dir / "p") + " " + quote(dir / "a.bin")).exit_code == 0);
  RunResult r = loom_pack("pack --seq-len 4 --output-dir " + quote(dir / "o") + " " + quote(dir / "p/packed.bin"));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains(dir / "p/packed.bin: is a packed shard, expected a loom token shard"));
}

TEST_CASE("pack, merge, split and convert check each input's checksum as they read it and publish nothing on a mismatch") {
  TempDir dir("pack");
  write_botchan_inputs(dir / "in");
  // Damage b.bin in place, same size, ids still < vocab: only the checksum can tell.
  std::string bytes = read_all(dir / "in/b.bin");
  const size_t at = bytes.size() / 2 & ~size_t{1};
  bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
  write_all(dir / "in/b.bin", bytes);
  const std::string inputs = quote(dir / "in/a.bin") + " " + quote(dir / "in/b.bin");
  const std::vector<std::string> runs = {
      "pack --seq-len 512 --output-dir " + quote(dir / "out") + " " + inputs,
      "pack --seq-len 512 --strategy bestfit --output-dir " + quote(dir / "out") + " " + inputs,
      "pack --seq-len 512 --max-packs-per-shard 10 --output-dir " + quote(dir / "out") + " " + inputs,
      "merge --output " + quote(dir / "out/m.bin") + " " + inputs,
      "split --valid-fraction 0.5 --output-dir " + quote(dir / "out") + " " + quote(dir / "in/b.bin"),
      "convert --to internlm --output-dir " + quote(dir / "out") + " " + quote(dir / "in/b.bin"),
  };
  for (const std::string& args : runs) {
    run("rm -rf " + quote(dir / "out"));
    RunResult r = loom_pack(args);
    INFO(args << "\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(dir / "in/b.bin: checksum mismatch: xxh64 of the .bin is "));
    // Nothing renamed into place and no temporary left: only empty folders, if any.
    CHECK(run("find " + quote(dir / "out") + " -type f 2>/dev/null | wc -l").output == "0\n");
  }
}
