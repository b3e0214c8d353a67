// A training folder's datasets are each one loom-pack output set: shards of two runs side by side,
// or a set missing a file, are refused by name; shards that record no set (older loom-pack) are
// taken as before. The start-up checksum pass splits the shards among ranks and reports the first
// bad shard in order, whatever the threads.
#include <catch2/catch.hpp>

#include "dataset.h"
#include "loom/error.h"
#include "loom/sys.h"
#include "test_util.h"

using namespace loom;
using Catch::Matchers::Contains;

namespace {

TokenizerInfo vocab() {
  TokenizerInfo t;
  t.vocab_size = 100;
  t.eos_id = 2;
  return t;
}

// n packs of 8 tokens (ids 3 + pack), one document each; set_id 0: no set recorded.
void write_shard(const std::string& bin, uint64_t n, uint64_t set_id = 0, uint32_t index = 0, uint32_t count = 0) {
  sys::make_dirs(sys::dirname(bin));
  PackedWriter w(bin, vocab(), 8, PackStrategy::kConcat, 0);
  for (uint64_t p = 0; p < n; ++p)
    w.add_pack(std::vector<uint32_t>(8, static_cast<uint32_t>(3 + p)), {PackedSegment{p, 0, 8, 0, kSegEndsDoc}});
  if (set_id) w.set_output_set(set_id, index, count);
  w.commit(n);
}

uint64_t packs(const std::vector<PackedDataset>& ds) {
  uint64_t n = 0;
  for (const PackedDataset& d : ds) n += d.num_packs();
  return n;
}

// Flips one byte of a shard's .bin: its checksum no longer matches.
void corrupt(const std::string& bin) {
  std::string bytes = test::read_all(bin);
  bytes[0] = static_cast<char>(bytes[0] ^ 1);
  test::write_all(bin, bytes);
}

}  // namespace

TEST_CASE("a dataset is one output set: two runs' shards or a partial set are refused by name", "[data][output-set]") {
  test::TempDir dir("output_set_data");
  // A complete rolled set, in any order of names.
  write_shard(dir / "ok/web/packed-00000.bin", 2, 0x5e7, 0, 3);
  write_shard(dir / "ok/web/packed-00001.bin", 3, 0x5e7, 1, 3);
  write_shard(dir / "ok/web/packed-00002.bin", 1, 0x5e7, 2, 3);
  write_shard(dir / "ok/code/packed.bin", 4, 0xc0de, 0, 1);
  CHECK(packs(open_datasets(dir / "ok", "data.train_folder", 8, true)) == 10);
  // Older files record no set: taken as before.
  write_shard(dir / "old/a.bin", 2);
  write_shard(dir / "old/b.bin", 2);
  CHECK(packs(open_datasets(dir / "old", "data.train_folder", 8, true)) == 4);

  // The stale rolled files of an earlier run beside a new single file.
  write_shard(dir / "stale/web/packed-00000.bin", 2, 0x1111, 0, 2);
  write_shard(dir / "stale/web/packed-00001.bin", 2, 0x1111, 1, 2);
  write_shard(dir / "stale/web/packed.bin", 4, 0x2222, 0, 1);
  CHECK_THROWS_WITH(open_datasets(dir / "stale", "data.train_folder", 8, true),
                    Contains("dataset 'web' holds the shards of two loom-pack runs: " + dir / "stale/web/packed-00000.bin" +
                             " (output set 0000000000001111, file 0 of 2) and " + dir / "stale/web/packed.bin" +
                             " (output set 0000000000002222, file 0 of 1)"));
  // An older file beside a set.
  write_shard(dir / "mixed/d/a.bin", 2);
  write_shard(dir / "mixed/d/b.bin", 2, 0x3333, 0, 1);
  CHECK_THROWS_WITH(open_datasets(dir / "mixed", "data.valid_folder", 8, false),
                    Contains(dir / "mixed/d/a.bin" + " (no output set recorded: an older loom-pack) and " + dir / "mixed/d/b.bin"));
  // A set missing its middle file, and one missing its last.
  write_shard(dir / "hole/d/packed-00000.bin", 1, 0x4444, 0, 3);
  write_shard(dir / "hole/d/packed-00002.bin", 1, 0x4444, 2, 3);
  CHECK_THROWS_WITH(open_datasets(dir / "hole", "data.train_folder", 8, true),
                    Contains("dataset 'd': output set 0000000000004444 is incomplete: file 1 of 3 is missing"));
  write_shard(dir / "tail/d/packed-00000.bin", 1, 0x4444, 0, 3);
  write_shard(dir / "tail/d/packed-00001.bin", 1, 0x4444, 1, 3);
  CHECK_THROWS_WITH(open_datasets(dir / "tail", "data.train_folder", 8, true),
                    Contains("dataset 'd': output set 0000000000004444 is incomplete: files 2 to 2 of 3 are missing"));
  // One file of a set twice (a copy under another name).
  write_shard(dir / "twice/d/a.bin", 1, 0x5555, 0, 2);
  write_shard(dir / "twice/d/b.bin", 1, 0x5555, 0, 2);
  CHECK_THROWS_WITH(open_datasets(dir / "twice", "data.train_folder", 8, true),
                    Contains(dir / "twice/d/b.bin" + " (output set 0000000000005555, file 0 of 2) are the same file of one output set"));
}

TEST_CASE("the checksum pass splits the shards among ranks and names the first bad one", "[data][checksums]") {
  test::TempDir dir("output_set_checksums");
  for (int i = 0; i < 6; ++i) write_shard(dir / ("d/s" + std::to_string(i) + ".bin"), 1 + static_cast<uint64_t>(i));
  corrupt(dir / "d/s1.bin");
  corrupt(dir / "d/s4.bin");
  // Shard i is rank i % world's: with 3 ranks, s1 and s4 are both rank 1's, reported s1 first.
  CHECK_NOTHROW(open_datasets(dir / "d", "data.train_folder", 8, true, 0, 3));
  CHECK_NOTHROW(open_datasets(dir / "d", "data.train_folder", 8, true, 2, 3));
  for (unsigned threads : {1u, 2u, 8u}) {
    const std::vector<PackedDataset> ds = open_datasets(dir / "d", "data.train_folder", 8, false);
    CHECK_THROWS_WITH(verify_checksums(ds, 1, 3, threads),
                      Contains(dir / "d/s1.bin" + ": checksum mismatch") && Contains("rank 1 of 3 checks this shard"));
    CHECK_THROWS_WITH(verify_checksums(ds, 0, 1, threads), Contains(dir / "d/s1.bin" + ": checksum mismatch"));
  }
  // With 2 ranks, s1 is rank 1's and s4 rank 0's.
  CHECK_THROWS_WITH(open_datasets(dir / "d", "data.train_folder", 8, true, 0, 2), Contains(dir / "d/s4.bin"));
  CHECK_THROWS_WITH(open_datasets(dir / "d", "data.train_folder", 8, true, 1, 2), Contains(dir / "d/s1.bin"));
}
