// One test per corruption mode of every shard format loom-pack reads: a handcrafted bad file, and
// `loom-pack verify` must reject it with exit code 1 and this exact message, without touching it.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <regex>
#include <vector>

#include "fixtures.h"
#include "loom/hash.h"
#include "loom/internlm_format.h"
#include "loom/packed_format.h"
#include "loom/sys.h"

using namespace loom;
using namespace loom::test;

namespace {

// A small valid loom shard: vocab 1000 (uint16), 3 documents, 8 tokens, no bos/eos flags (the last
// document is a lone 3); .meta = 128 + 4*8 bytes.
struct SmallShard {
  TempDir dir{"corrupt"};
  std::string bin = dir / "a.bin";
  std::string meta = bin + ".meta";
  SmallShard() { write_shard(bin, {{1, 5, 2}, {1, 999, 7, 2}, {3}}, TokenizerInfo{1000, 1, 2, 0, 0xabc}); }
};

template <typename T>
void patch(const std::string& path, size_t offset, T value) {
  std::string bytes = read_all(path);
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(&bytes[offset], &value, sizeof(T));
  write_all(path, bytes);
}

void truncate_by(const std::string& path, size_t n) {
  std::string bytes = read_all(path);
  write_all(path, bytes.substr(0, bytes.size() - n));
}

// A small valid packed shard: vocab 50 (uint16), seq_len 4, concat, 2 packs, one source document of
// 6 tokens cut in two. .meta = 128-byte header + seg_offsets [0, 1, 2] + 2 segments of 24 bytes.
struct SmallPacked {
  static constexpr size_t kSegments = 128 + 3 * 8;  // byte offset of segments[0]
  TempDir dir{"corrupt"};
  std::string bin = dir / "p.bin";
  std::string meta = bin + ".meta";
  SmallPacked() { make(); }
  void make() {
    PackedWriter w(bin, TokenizerInfo{50, 1, 2, 3, 7}, 4, PackStrategy::kConcat, 0);
    w.add_pack({10, 11, 12, 13}, {PackedSegment{0, 0, 4, 0, 0}});
    w.add_pack({14, 15}, {PackedSegment{0, 0, 2, 4, kSegEndsDoc}});
    w.commit(1);
  }
  // Patches the index (seg_offsets or segments) and rewrites index_xxh64 to match.
  template <typename T>
  void patch_index(size_t offset, T value) {
    patch<T>(meta, offset, value);
    const std::string bytes = read_all(meta);
    patch<uint64_t>(meta, 88, xxh64(bytes.data() + 128, bytes.size() - 128));
  }
};

std::string xxh64_hex_at(const std::string& path, size_t offset) {
  uint64_t v = 0;
  std::memcpy(&v, read_all(path).data() + offset, sizeof v);
  return hex64(v);
}
std::string index_xxh64_hex(const std::string& meta) {
  const std::string bytes = read_all(meta);
  return hex64(xxh64(bytes.data() + 128, bytes.size() - 128));
}

// The message of verify's "FAIL ..." line, without the source location LOOM_CHECK appends.
std::string failure_line(const std::string& output) {
  const size_t at = output.find("FAIL ");
  if (at == std::string::npos) return "";
  std::string line = output.substr(at + 5, output.find('\n', at) - at - 5);
  static const std::regex location(" \\[[a-z_]+\\.cpp:[0-9]+\\]$");
  return std::regex_replace(line, location, "");
}

// verify --deep must fail with exactly `message` (then the source location) and change nothing.
// index: the file beside the .bin (its .meta unless given: a Megatron dataset's PREFIX.idx).
void expect_rejected(const std::string& bin, const std::string& message, const std::string& flags = "--deep",
                     std::string index = "") {
  if (index.empty()) index = bin + ".meta";
  const std::string before_bin = read_all(bin), before_meta = read_all(index);
  RunResult r = loom_pack("verify " + flags + " " + quote(bin));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(failure_line(r.output) == message);
  CHECK_THAT(r.output, Catch::Contains(": 1 shards, 0 passed, 1 failed\n"));
  CHECK(read_all(bin) == before_bin);
  CHECK(read_all(index) == before_meta);
}

}  // namespace

TEST_CASE("verify passes a good shard and prints its counts") {
  SmallShard s;
  RunResult r = loom_pack("verify --deep " + quote(s.bin));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("OK   " + s.bin + " (loom, 3 documents, 8 tokens)\n"));
  CHECK_THAT(r.output, Catch::Contains("verify --deep: 1 shards, 1 passed, 0 failed\n"));
}

TEST_CASE("corrupt loom shard - bad magic") {
  SmallShard s;
  patch<char>(s.meta, 0, 'X');
  expect_rejected(s.bin, s.meta + ": bad magic: not a loom shard index (expected \"LOOMTOK\" at byte 0)");
}

TEST_CASE("corrupt loom shard - newer version") {
  SmallShard s;
  patch<uint32_t>(s.meta, 8, 2);
  expect_rejected(s.bin, s.meta + ": format version 2 is newer than this build of loom reads (up to 1); upgrade loom");
}

TEST_CASE("corrupt loom shard - truncated .bin") {
  SmallShard s;
  truncate_by(s.bin, 2);
  expect_rejected(s.bin, s.bin + ": truncated .bin: 14 bytes, expected 16 (8 tokens of uint16)");
}

TEST_CASE("corrupt loom shard - truncated .meta") {
  SmallShard s;
  truncate_by(s.meta, 8);
  expect_rejected(s.bin, s.meta + ": truncated .meta: 152 bytes, expected 160 for 3 documents");
}

TEST_CASE("corrupt loom shard - offsets out of order") {
  SmallShard s;
  patch<uint64_t>(s.meta, 128 + 2 * 8, 2);  // offsets = [0, 3, 2, 8]
  expect_rejected(s.bin, s.meta + ": offsets out of order: document 1 ends at token 2 (byte offset 144), before it "
                                  "starts at token 3");
}

TEST_CASE("corrupt loom shard - offset past the end") {
  SmallShard s;
  patch<uint64_t>(s.meta, 128 + 2 * 8, 9);  // offsets = [0, 3, 9, 8]
  expect_rejected(s.bin, s.meta + ": offset past the end: document 1 ends at token 9 (byte offset 144), but " + s.bin +
                             " has 8 tokens");
}

TEST_CASE("corrupt loom shard - id at or above vocab, found by --deep only") {
  SmallShard s;
  patch<uint16_t>(s.bin, 8, 1000);  // token 4 = document 1's 999
  RunResult shallow = loom_pack("verify " + quote(s.bin));
  CHECK(shallow.exit_code == 0);
  expect_rejected(s.bin, s.bin + ": token id 1000 >= vocab size 1000 in document 1 at byte offset 8 (token 4)");
}

TEST_CASE("corrupt loom shard - checksum mismatch") {
  SmallShard s;
  const std::string want = py_xxh64_hex(s.bin);
  patch<uint16_t>(s.bin, 8, 998);
  const std::string got = py_xxh64_hex(s.bin);
  REQUIRE(got != want);
  expect_rejected(s.bin, s.bin + ": checksum mismatch: xxh64 of the .bin is " + got + ", the .meta says " + want +
                             " (the .bin was modified or corrupted)");
}

TEST_CASE("corrupt loom shard - empty shard") {
  SmallShard s;
  patch<uint64_t>(s.meta, 40, 0);
  expect_rejected(s.bin, s.meta + ": empty shard: it has no documents");
}

TEST_CASE("corrupt InternLM shard - .meta that is not int32 (N, 2)") {
  TempDir dir("corrupt");
  const std::string bin = dir / "i.bin", meta = bin + ".meta";
  InternlmWriter w(bin);
  w.add_doc({1, 2, 3});
  w.add_doc({4});
  w.add_doc({});
  w.commit();
  REQUIRE(loom_pack("verify --deep " + quote(bin)).exit_code == 0);
  // numpy itself writes the bad index files.
  auto np_save = [&](const std::string& expr) {
    RunResult r = run(python() + " -c " + quote("import numpy as np, sys; np.save(open(sys.argv[1], 'wb'), " + expr + ")") +
                      " " + quote(meta));
    REQUIRE(r.exit_code == 0);
  };
  np_save("np.array([[0, 3], [23, 1], [39, 0]], dtype='<i8')");
  expect_rejected(bin, meta + ": InternLM .meta must be int32 (N, 2) in C order, found descr '<i8', fortran_order "
                              "False, shape (3, 2)");
  np_save("np.zeros((3, 3), dtype='<i4')");
  expect_rejected(bin, meta + ": InternLM .meta must be int32 (N, 2), found shape (3, 3)");
  np_save("np.zeros((6,), dtype='<i4')");
  expect_rejected(bin, meta + ": InternLM .meta must be int32 (N, 2), found shape (6,)");
}

TEST_CASE("corrupt InternLM shard - a line whose count disagrees with the .meta, an id past --vocab-size") {
  TempDir dir("corrupt");
  const std::string bin = dir / "i.bin";
  InternlmWriter w(bin);
  w.add_doc({1, 2, 3});
  w.add_doc({4});
  w.commit();
  std::string text = read_all(bin);
  REQUIRE(text == "{\"tokens\": [1, 2, 3]}\n{\"tokens\": [4]}\n");
  write_all(bin, "{\"tokens\": [1, 2, 3]}\n{\"tokens\": [5, 6]}\n");
  expect_rejected(bin, bin + ": document 1 at byte offset 22: the line holds 2 tokens, the .meta says 1");
  write_all(bin, "{\"tokens\": [1, 2, 3]}\n{\"tokens\": [5]}\n");
  CHECK(loom_pack("verify --deep --vocab-size 6 " + quote(bin)).exit_code == 0);
  expect_rejected(bin, bin + ": token id 5 >= vocab size 5 in document 1 at byte offset 22 (token 0 of the line)",
                  "--deep --vocab-size 5");
  write_all(bin, "{\"tokens\": [1, 2, 3]}\n{\"tokens\": [4]}");
  expect_rejected(bin, bin + ": truncated .bin: the last line has no newline");
}

TEST_CASE("corrupt packed shard - truncated .bin, index and .bin checksums") {
  SmallPacked s;
  RunResult ok = loom_pack("verify --deep " + quote(s.bin));
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.output, Catch::Contains("OK   " + s.bin + " (packed, 2 packs, 6 tokens)\n"));

  truncate_by(s.bin, 2);
  expect_rejected(s.bin, s.bin + ": truncated .bin: 14 bytes, expected 16 = num_packs 2 x seq_len 4 x 2 bytes (uint16)");
  s.make();
  patch<uint32_t>(s.meta, 8, 7);
  expect_rejected(s.bin, s.meta + ": format version 7 is newer than this build of loom reads (up to 1); upgrade loom");
  s.make();
  const std::string want = py_xxh64_hex(s.bin);
  patch<uint16_t>(s.bin, 2, 40);
  expect_rejected(s.bin, s.bin + ": checksum mismatch: xxh64 of the .bin is " + py_xxh64_hex(s.bin) + ", the .meta says " +
                             want + " (the .bin was modified or corrupted)");
  s.make();
  patch<uint16_t>(s.bin, 2, 50);
  expect_rejected(s.bin, s.bin + ": token id 50 >= vocab size 50 in pack 0 at byte offset 2 (token 1)");
  s.make();
  // An index byte changed without its checksum: caught before any segment is looked at.
  const std::string index_before = xxh64_hex_at(s.meta, 88);
  patch<uint32_t>(s.meta, SmallPacked::kSegments + 12, 3);
  expect_rejected(s.bin, s.meta + ": index checksum mismatch: xxh64 " + index_xxh64_hex(s.meta) + ", header says " +
                             index_before);
}

TEST_CASE("corrupt packed shard - seq_len") {
  SmallPacked s;
  patch<uint32_t>(s.meta, 36, 0);
  expect_rejected(s.bin, s.meta + ": seq_len is 0");
  // A seq_len that is not the .bin's: its size disagrees, in either direction.
  s.make();
  patch<uint32_t>(s.meta, 36, 8);
  expect_rejected(s.bin, s.bin + ": truncated .bin: 16 bytes, expected 32 = num_packs 2 x seq_len 8 x 2 bytes (uint16)");
  s.make();
  patch<uint32_t>(s.meta, 36, 2);
  expect_rejected(s.bin, s.bin + ": .bin too long: 16 bytes, expected 8 = num_packs 2 x seq_len 2 x 2 bytes (uint16)");
}

TEST_CASE("corrupt packed shard - pad_id") {
  SmallPacked s;
  patch<uint32_t>(s.meta, 40, 50);
  expect_rejected(s.bin, s.meta + ": pad_id 50 >= vocab size 50");
}

TEST_CASE("corrupt packed shard - strategy") {
  SmallPacked s;
  patch<uint32_t>(s.meta, 44, 2);
  expect_rejected(s.bin, s.meta + ": unknown strategy 2, expected 0 (concat) or 1 (bestfit)");
}

TEST_CASE("corrupt packed shard - counts") {
  SmallPacked s;
  patch<uint64_t>(s.meta, 48, 0);
  expect_rejected(s.bin, s.meta + ": empty shard: it has no packs");
  s.make();
  patch<uint64_t>(s.meta, 56, 3);  // num_segments
  expect_rejected(s.bin, s.meta + ": truncated .meta: 200 bytes, expected 224 for 2 packs and 3 segments");
  s.make();
  truncate_by(s.meta, 24);
  expect_rejected(s.bin, s.meta + ": truncated .meta: 176 bytes, expected 200 for 2 packs and 2 segments");
}

// seg_offsets and segments are covered by index_xxh64: each case below patches the index and
// rewrites that checksum, so the check of the field itself is what rejects the file.
TEST_CASE("corrupt packed shard - seg_offsets") {
  SmallPacked s;  // seg_offsets = [0, 1, 2] at byte 128
  s.patch_index<uint64_t>(128, 1);
  expect_rejected(s.bin, s.meta + ": seg_offsets[0] is 1, expected 0");
  s.make();
  s.patch_index<uint64_t>(144, 0);  // [0, 1, 0]
  expect_rejected(s.bin, s.meta + ": seg_offsets out of order: pack 1 (byte offset 144) ends at segment 0, before it "
                                  "starts at 1");
  s.make();
  s.patch_index<uint64_t>(144, 3);  // [0, 1, 3]
  expect_rejected(s.bin, s.meta + ": seg_offsets past the end: pack 1 (byte offset 144) ends at segment 3, but there "
                                  "are 2 segments");
  s.make();
  s.patch_index<uint64_t>(144, 1);  // [0, 1, 1]: the second segment belongs to no pack
  expect_rejected(s.bin, s.meta + ": seg_offsets[2] is 1, expected num_segments 2");
}

TEST_CASE("corrupt packed shard - segments") {
  SmallPacked s;  // segments[0] = {doc 0, start 0, length 4} at byte 152, segments[1] = {0, 0, 2} at 176
  const size_t seg1 = SmallPacked::kSegments + 24;
  s.patch_index<uint32_t>(SmallPacked::kSegments + 12, 0);  // segments[0].length
  expect_rejected(s.bin, s.meta + ": segments[0] of pack 0 (byte offset 152): start 0, length 0: a segment must be "
                                  "non-empty, after the previous one and inside the pack's seq_len 4 tokens");
  s.make();
  s.patch_index<uint32_t>(seg1 + 8, 3);  // segments[1].start: [3, 5) overruns the pack
  expect_rejected(s.bin, s.meta + ": segments[1] of pack 1 (byte offset 176): start 3, length 2: a segment must be "
                                  "non-empty, after the previous one and inside the pack's seq_len 4 tokens");
  s.make();
  s.patch_index<uint64_t>(seg1, 1);  // segments[1].doc
  expect_rejected(s.bin, s.meta + ": segments[1] of pack 1 (byte offset 176): doc 1 >= num_source_docs 1");
  s.make();
  s.patch_index<uint32_t>(seg1 + 12, 1);  // segments[1].length: 5 tokens covered, the header says 6
  expect_rejected(s.bin, s.meta + ": segments cover 5 tokens, the header's num_tokens is 6");
}

TEST_CASE("verify walks folders, reports every failure, and exits 2 on bad usage") {
  TempDir dir("corrupt");
  write_shard(dir / "good.bin", {{1, 2}}, TokenizerInfo{10, -1, -1, 0, 0});
  write_shard(dir / "bad.bin", {{1, 2}}, TokenizerInfo{10, -1, -1, 0, 0});
  patch<uint32_t>(dir / "bad.bin.meta", 8, 3);
  write_all(dir / "notes.bin", "no .meta beside me, so not a shard");
  RunResult r = loom_pack("verify " + quote(dir.path()));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("OK   " + dir / "good.bin (loom, 1 documents, 2 tokens)\n"));
  CHECK_THAT(r.output, Catch::Contains("FAIL " + dir / "bad.bin.meta: format version 3 is newer"));
  CHECK_THAT(r.output, Catch::Contains("verify: 2 shards, 1 passed, 1 failed\n"));
  CHECK(loom_pack("verify --no-such-flag " + quote(dir / "good.bin")).exit_code == 2);
  CHECK(loom_pack("verify").exit_code == 2);
  CHECK(loom_pack("frobnicate").exit_code == 2);
}

TEST_CASE("verify --deep checks every header field of a loom shard against the data") {
  TempDir dir("corrupt");
  const std::string bin = dir / "f.bin", meta = bin + ".meta";
  // vocab 1000, bos 1, eos 2, both flags; documents [1 5 2], [1 9 2], [] (empty: no bos/eos to check).
  auto make = [&](const Docs& docs) { write_shard(bin, docs, TokenizerInfo{1000, 1, 2, kShardFlagBos | kShardFlagEos, 7}); };
  make({{1, 5, 2}, {1, 9, 2}, {}});
  REQUIRE(loom_pack("verify --deep " + quote(bin)).exit_code == 0);
  make({{1, 5, 2}, {9, 2}, {}});
  expect_rejected(bin, bin + ": document 1 at byte offset 6 starts with 9, but the .meta's flags say every document "
                             "starts with bos_id 1");
  make({{1, 5, 2}, {1, 9}, {}});
  expect_rejected(bin, bin + ": document 1 at byte offset 8 ends with 9, but the .meta's flags say every document "
                             "ends with eos_id 2");
  make({{1, 5, 2}, {1, 9, 2}, {}});
  patch<int32_t>(meta, 24, 1000);
  expect_rejected(bin, meta + ": bos_id 1000 is neither -1 (none) nor < vocab size 1000");
  make({{1, 5, 2}, {1, 9, 2}, {}});
  patch<int32_t>(meta, 28, -2);
  expect_rejected(bin, meta + ": eos_id -2 is neither -1 (none) nor < vocab size 1000");
  make({{1, 5, 2}, {1, 9, 2}, {}});
  patch<uint32_t>(meta, 32, 7);
  expect_rejected(bin, meta + ": flags 7 has bits other than 0 (bos) and 1 (eos)");
  make({{1, 5, 2}, {1, 9, 2}, {}});
  patch<int32_t>(meta, 24, -1);
  expect_rejected(bin, meta + ": flags say documents start with bos, but bos_id is -1");
  make({{1, 5, 2}, {1, 9, 2}, {}});
  patch<uint32_t>(meta, 80, 3);
  expect_rejected(bin, meta + ": encoder 3 is not 0, 1 or 2");
  make({{1, 5, 2}, {1, 9, 2}, {}});
  patch<uint32_t>(meta, 36, 1);
  expect_rejected(bin, meta + ": reserved fields at byte 36 and 84 are 1 and 0, expected 0");
  make({{1, 5, 2}, {1, 9, 2}, {}});
  patch<uint8_t>(meta, 127, 5);
  expect_rejected(bin, meta + ": reserved byte 127 is 5, expected 0 (written by a newer loom, or corrupted)");
  // Without --deep the header is read as before (reserved bytes are ignored by a plain open).
  CHECK(loom_pack("verify " + quote(bin)).exit_code == 0);
}

TEST_CASE("verify --vocab-size applies to loom and packed shards, and is refused without --deep") {
  SmallShard s;  // ids up to 999
  CHECK(loom_pack("verify --deep --vocab-size 1000 " + quote(s.bin)).exit_code == 0);
  expect_rejected(s.bin, s.bin + ": token id 999 >= --vocab-size 999 in document 1 at byte offset 8 (token 4)",
                  "--deep --vocab-size 999");
  SmallPacked p;  // ids 10..15
  CHECK(loom_pack("verify --deep --vocab-size 16 " + quote(p.bin)).exit_code == 0);
  expect_rejected(p.bin, p.bin + ": token id 15 >= --vocab-size 15 in pack 1 at byte offset 10 (token 5)",
                  "--deep --vocab-size 15");
  RunResult r = loom_pack("verify --vocab-size 10 " + quote(s.bin));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--vocab-size checks token ids, which only --deep reads"));
}

TEST_CASE("verify refuses every InternLM .meta that numpy.load refuses, and reads every one it reads") {
  TempDir dir("corrupt");
  const std::string bin = dir / "i.bin", meta = bin + ".meta";
  InternlmWriter w(bin);
  w.add_doc({1, 2, 3});
  w.add_doc({4});
  w.commit();
  const std::string good = read_all(meta);
  REQUIRE(good.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const std::string dict = good.substr(10, 118);  // the 118-byte header text, padding and '\n' included
  auto with_header = [&](char major, char minor, std::string text) {
    text.resize(118, ' ');
    text.back() = '\n';
    return std::string("\x93NUMPY", 6) + major + minor + good.substr(8, 2) + text + good.substr(128);
  };
  const std::string base = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"good", good},
      {"version 1.1", with_header(1, 1, base)},
      {"version 4.0", with_header(4, 0, base)},
      {"junk in the padding", with_header(1, 0, base + "   junk")},
      {"a second dict", with_header(1, 0, base + "{}")},
      {"an extra key", with_header(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}")},
      {"no shape", with_header(1, 0, "{'descr': '<i4', 'fortran_order': False}")},
      {"no closing brace", with_header(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), ")},
      {"no trailing comma", with_header(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2)}")},
      {"keys reordered", with_header(1, 0, "{'shape': (2, 2), 'fortran_order': False, 'descr': '<i4'}")},
      {"tabs and newlines", with_header(1, 0, "{'descr':\t'<i4',\n 'fortran_order': False, 'shape': (2, 2)}\n\n")},
  };
  for (const auto& [name, bytes] : cases) {
    write_all(meta, bytes);
    RunResult np = run(python() + " -c " + quote("import numpy, sys; numpy.load(sys.argv[1])") + " " + quote(meta) +
                       " 2>&1");
    RunResult loom = loom_pack("verify --deep " + quote(bin));
    INFO(name << "\nnumpy: " << np.output << "\nloom: " << loom.output);
    CHECK((np.exit_code == 0) == (loom.exit_code == 0));
    CHECK(loom.exit_code == (np.exit_code == 0 ? 0 : 1));
  }
}

namespace {
// A small Megatron-LM dataset, its bytes laid out here by hand (not by loom's writer): uint16,
// sequences of 3, 2 and 4 ids (1..9); document 0 = sequences 0 and 1 (split into sentences),
// document 1 = no sequence (an empty text), document 2 = sequence 2. S = 3, D = 4:
// .idx = 34-byte header + lengths at 34 + pointers at 46 + document_indices at 70 = 102 bytes.
struct SmallMegatron {
  TempDir dir{"corrupt_megatron"};
  std::string bin = dir / "m_text_document.bin";
  std::string idx = dir / "m_text_document.idx";
  SmallMegatron() {
    std::string i("MMIDIDX\0\0", 9);
    const auto put = [&i](auto v) { i.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(uint64_t{1});
    put(uint8_t{8});
    put(uint64_t{3});
    put(uint64_t{4});
    for (int32_t len : {3, 2, 4}) put(len);
    for (int64_t ptr : {0, 6, 10}) put(ptr);
    for (int64_t d : {0, 2, 2, 3}) put(d);
    write_all(idx, i);
    std::string b;
    for (uint16_t id = 1; id <= 9; ++id) b.append(reinterpret_cast<const char*>(&id), 2);
    write_all(bin, b);
  }
  void reject(const std::string& message, const std::string& flags = "--deep") { expect_rejected(bin, message, flags, idx); }
};
}  // namespace

TEST_CASE("verify reads a Megatron dataset: documents of several sequences and of none") {
  SmallMegatron m;
  RunResult r = loom_pack("verify --deep --vocab-size 10 " + quote(m.bin));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("OK   " + m.bin + " (megatron, 3 documents, 9 tokens)\n"));
  // Its documents, through the loom shard convert makes of it.
  REQUIRE(loom_pack("convert --to loom --vocab-size 10 --output-dir " + quote(m.dir / "l") + " " + quote(m.bin)).exit_code == 0);
  CHECK(read_shard(m.dir / "l/m_text_document.bin") == Docs{{1, 2, 3, 4, 5}, {}, {6, 7, 8, 9}});
}

TEST_CASE("corrupt Megatron dataset - bad magic") {
  SmallMegatron m;
  patch<char>(m.idx, 0, 'X');
  m.reject(m.idx + ": bad magic: not a Megatron-LM index (expected \"MMIDIDX\\0\\0\" at byte 0)");
}

TEST_CASE("corrupt Megatron dataset - version") {
  SmallMegatron m;
  patch<uint64_t>(m.idx, 9, 2);
  m.reject(m.idx + ": version 2 at byte 9; this build reads version 1");
}

TEST_CASE("corrupt Megatron dataset - dtype code") {
  SmallMegatron m;
  patch<uint8_t>(m.idx, 17, 5);
  m.reject(m.idx + ": dtype code 5 (int64) at byte 17; token ids are uint16 (code 8) or int32 (code 4)");
  patch<uint8_t>(m.idx, 17, 9);
  m.reject(m.idx + ": dtype code 9 (unknown) at byte 17; token ids are uint16 (code 8) or int32 (code 4)");
}

TEST_CASE("corrupt Megatron dataset - truncated .idx") {
  SmallMegatron m;
  truncate_by(m.idx, 8);
  m.reject(m.idx + ": truncated .idx or wrong counts: 94 bytes, expected 102 for 3 sequences and 4 document indices");
  truncate_by(m.idx, 80);
  m.reject(m.idx + ": truncated .idx: 14 bytes, expected at least the 34-byte header");
}

TEST_CASE("corrupt Megatron dataset - sequence modes (a multimodal dataset)") {
  SmallMegatron m;
  write_all(m.idx, read_all(m.idx) + std::string(3, '\0'));
  m.reject(m.idx + ": truncated .idx or wrong counts: 105 bytes, expected 102 for 3 sequences and 4 document indices"
                   " (it has sequence modes: a multimodal dataset, which loom does not read)");
}

TEST_CASE("corrupt Megatron dataset - negative sequence length") {
  SmallMegatron m;
  patch<int32_t>(m.idx, 34, -1);
  m.reject(m.idx + ": sequence 0 (byte offset 34): length -1 is negative");
}

TEST_CASE("corrupt Megatron dataset - pointers inconsistent with the lengths") {
  SmallMegatron m;
  patch<int64_t>(m.idx, 46 + 8, 4);
  m.reject(m.idx + ": sequence 1 (byte offset 54): pointer 4, expected 6 (the lengths before it times 2 bytes)");
}

TEST_CASE("corrupt Megatron dataset - document index not starting at 0") {
  SmallMegatron m;
  patch<int64_t>(m.idx, 70, 1);
  m.reject(m.idx + ": document_indices[0] (byte offset 70) is 1, expected 0");
}

TEST_CASE("corrupt Megatron dataset - document index not monotone") {
  SmallMegatron m;
  patch<int64_t>(m.idx, 70 + 16, 1);  // [0, 2, 1, 3]
  m.reject(m.idx + ": document_indices[2] (byte offset 86) is 1, expected between the previous one (2) and the "
                   "sequence count 3");
}

TEST_CASE("corrupt Megatron dataset - sequences after the last document") {
  SmallMegatron m;
  patch<int64_t>(m.idx, 70 + 24, 2);  // [0, 2, 2, 2]
  m.reject(m.idx + ": the last document index is 2, expected the sequence count 3 (sequences after the last document)");
}

TEST_CASE("corrupt Megatron dataset - .bin size mismatch") {
  SmallMegatron m;
  truncate_by(m.bin, 2);
  m.reject(m.bin + ": .bin has 16 bytes, expected 18 (9 tokens of uint16 by " + m.idx + ")");
}

TEST_CASE("corrupt Megatron dataset - ids out of range (--deep)") {
  SmallMegatron m;
  m.reject(m.bin + ": token id 9 >= vocab size 9 in document 2 (token 3, byte offset 16)", "--deep --vocab-size 9");
  // An int32 dataset: a negative id.
  patch<uint8_t>(m.idx, 17, 4);
  patch<int64_t>(m.idx, 46 + 8, 12);  // pointers of 4-byte ids: 0, 12, 20
  patch<int64_t>(m.idx, 46 + 16, 20);
  std::string b;
  for (int32_t id : {1, 2, 3, 4, 5, 6, 7, -8, 9}) b.append(reinterpret_cast<const char*>(&id), 4);
  write_all(m.bin, b);
  m.reject(m.bin + ": token id -8 is negative in document 2 (token 2, byte offset 28)");
}

// ---- Forged headers: counts that wrap, fields out of range, files that are not files ----

namespace {
// Rewrites a loom shard's offsets_xxh64 and bin_xxh64 to match its files: a forged shard, whose
// checksums agree with its bytes, not a damaged one.
void reseal_loom(const std::string& bin) {
  const std::string meta = bin + ".meta", bytes = read_all(meta), data = read_all(bin);
  patch<uint64_t>(meta, 64, xxh64(bytes.data() + 128, bytes.size() - 128));
  patch<uint64_t>(meta, 56, xxh64(data.data(), data.size()));
}

// Every loom-pack command that reads loom shards, on one input, must exit 1 with `message`.
void expect_every_command_refuses(const std::string& bin, const std::string& message, const std::string& out_dir) {
  const std::vector<std::string> commands = {
      "verify " + quote(bin),
      "verify --deep " + quote(bin),
      "stats " + quote(bin),
      "merge --output " + quote(out_dir + "/m.bin") + " " + quote(bin),
      "split --valid-docs 1 --output-dir " + quote(out_dir + "/s") + " " + quote(bin),
      "convert --to internlm --output-dir " + quote(out_dir + "/c") + " " + quote(bin),
      "convert --to megatron --output-dir " + quote(out_dir + "/g") + " " + quote(bin),
      "pack --seq-len 4 --strategy bestfit --output-dir " + quote(out_dir + "/pb") + " " + quote(bin),
      "pack --seq-len 4 --strategy concat --output-dir " + quote(out_dir + "/pc") + " " + quote(bin),
  };
  for (const std::string& c : commands) {
    RunResult r = loom_pack(c);
    INFO(c << "\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(message));
  }
}

// Runs loom-pack under a time limit (a reader that blocks fails the test instead of hanging it)
// and expects exit 1 with `message`.
void expect_refused_in_time(const std::string& args, const std::string& message) {
  RunResult r = run("timeout 60 " + std::string(LOOM_PACK_BIN) + " " + args);
  INFO(args << "\n" << r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains(message));
}
}  // namespace

TEST_CASE("forged loom shard - num_tokens x dtype_bytes wraps past 2^64, checksums recomputed") {
  SmallShard s;  // offsets [0, 3, 7, 8]
  const uint64_t wrap = uint64_t{1} << 63;  // x 2 bytes = 2^64: a .bin of 0 bytes "fits"
  patch<uint64_t>(s.meta, 48, wrap);
  patch<uint64_t>(s.meta, 128 + 3 * 8, wrap);
  write_all(s.bin, "");
  reseal_loom(s.bin);
  const std::string message =
      s.meta + ": num_tokens 9223372036854775808 x dtype_bytes 2 does not fit 64 bits (a forged or corrupted header)";
  expect_rejected(s.bin, message, "");
  expect_every_command_refuses(s.bin, message, s.dir / "out");
}

TEST_CASE("forged loom shard - num_docs whose offsets array wraps past 2^64") {
  SmallShard s;
  patch<uint64_t>(s.meta, 40, (uint64_t{1} << 61) - 1);  // (num_docs + 1) x 8 = 2^64
  expect_rejected(s.bin, s.meta + ": num_docs 2305843009213693951: (num_docs + 1) x 8 bytes of offsets does not fit 64 "
                                  "bits (a forged or corrupted header)",
                  "");
}

TEST_CASE("loom shard header fields are checked on open, not only by --deep") {
  SmallShard s;  // vocab 1000, bos 1, eos 2, no flags
  patch<int32_t>(s.meta, 24, 1000);
  expect_rejected(s.bin, s.meta + ": bos_id 1000 is neither -1 (none) nor < vocab size 1000", "");
  expect_every_command_refuses(s.bin, s.meta + ": bos_id 1000 is neither -1 (none) nor < vocab size 1000",
                               s.dir / "out");
  SmallShard t;
  patch<uint32_t>(t.meta, 32, 4);
  expect_rejected(t.bin, t.meta + ": flags 4 has bits other than 0 (bos) and 1 (eos)", "");
  SmallShard u;
  patch<uint32_t>(u.meta, 80, 7);
  expect_rejected(u.bin, u.meta + ": encoder 7 is not 0, 1 or 2", "");
}

TEST_CASE("loom shard reserved bytes: refused by --deep and by every command that copies the data") {
  SmallShard s;
  patch<uint8_t>(s.meta, 100, 1);
  const std::string message = s.meta + ": reserved byte 100 is 1, expected 0 (written by a newer loom, or corrupted)";
  expect_rejected(s.bin, message);
  for (const std::string& c : {"merge --output " + quote(s.dir / "m.bin"),
                               "split --valid-docs 1 --output-dir " + quote(s.dir / "s"),
                               "convert --to internlm --output-dir " + quote(s.dir / "c"),
                               "pack --seq-len 4 --strategy bestfit --output-dir " + quote(s.dir / "p")}) {
    RunResult r = loom_pack(c + " " + quote(s.bin));
    INFO(c << "\n" << r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(message));
  }
}

TEST_CASE("forged packed shard - bos_id beyond the vocabulary") {
  SmallPacked s;  // vocab 50, bos 1, eos 2, flags 3
  patch<int32_t>(s.meta, 24, 50);
  expect_rejected(s.bin, s.meta + ": bos_id 50 is neither -1 (none) nor < vocab size 50", "");
  expect_rejected(s.bin, s.meta + ": bos_id 50 is neither -1 (none) nor < vocab size 50");
}

TEST_CASE("forged packed shard - eos_id beyond the vocabulary") {
  SmallPacked s;
  patch<int32_t>(s.meta, 28, 1 << 30);
  expect_rejected(s.bin, s.meta + ": eos_id 1073741824 is neither -1 (none) nor < vocab size 50", "");
  s.make();
  patch<int32_t>(s.meta, 28, -5);
  expect_rejected(s.bin, s.meta + ": eos_id -5 is neither -1 (none) nor < vocab size 50");
}

TEST_CASE("forged packed shard - unknown header flag bits") {
  SmallPacked s;
  patch<uint32_t>(s.meta, 32, 3 | (1u << 7));
  expect_rejected(s.bin, s.meta + ": flags 131 has bits other than 0 (bos) and 1 (eos)", "");
  s.make();
  patch<int32_t>(s.meta, 28, -1);  // flags say eos, but there is none
  expect_rejected(s.bin, s.meta + ": flags say documents end with eos, but eos_id is -1");
}

TEST_CASE("forged packed shard - unknown segment flag bits") {
  SmallPacked s;  // segments[1] at byte 176, its seg_flags at 196
  s.patch_index<uint32_t>(SmallPacked::kSegments + 24 + 20, kSegEndsDoc | 4u);
  expect_rejected(s.bin, s.meta + ": segments[1] of pack 1 (byte offset 176): seg_flags 5 has bits other than 0 "
                                  "(ends its document)",
                  "");
}

TEST_CASE("forged InternLM shard - a row count whose index size wraps past 2^64") {
  TempDir dir("corrupt");
  const std::string bin = dir / "i.bin", meta = bin + ".meta";
  InternlmWriter w(bin);
  w.add_doc({1, 2, 3});
  w.commit();
  const std::string good = read_all(meta);
  // shape (2^61, 2): 2^61 rows x 8 bytes = 2^64, so a .meta of the header alone "fits".
  std::string text = "{'descr': '<i4', 'fortran_order': False, 'shape': (2305843009213693952, 2), }";
  text.resize(118, ' ');
  text.back() = '\n';
  write_all(meta, good.substr(0, 10) + text);
  expect_rejected(bin, meta + ": shape (2305843009213693952, 2): 2305843009213693952 rows x 8 bytes does not fit 64 "
                              "bits (a forged or corrupted header)",
                  "");
  RunResult r = loom_pack("convert --to loom --vocab-size 10 --output-dir " + quote(dir / "c") + " " + quote(bin));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("2305843009213693952 rows x 8 bytes does not fit 64 bits"));
}

TEST_CASE("forged Megatron index - counts no file can hold") {
  SmallMegatron m;
  patch<uint64_t>(m.idx, 18, uint64_t{1} << 62);  // 12 x S wraps
  m.reject(m.idx + ": sequence count 4611686018427387904 at byte 18 does not fit 64 bits as 12-byte entries (a forged "
                   "or corrupted header)",
           "");
  SmallMegatron n;
  patch<uint64_t>(n.idx, 26, uint64_t{1} << 61);  // 8 x D wraps
  n.reject(n.idx + ": document count 2305843009213693952 at byte 26 does not fit 64 bits as 8-byte entries (a forged "
                   "or corrupted header)",
           "");
}

TEST_CASE("a FIFO as .bin, .meta or .idx is refused at once, not waited on") {
  TempDir dir("corrupt_fifo");
  write_shard(dir / "a.bin", {{1, 2}}, TokenizerInfo{10, -1, -1, 0, 0});
  REQUIRE(run("mkfifo " + quote(dir / "f.bin")).exit_code == 0);
  write_all(dir / "f.bin.meta", read_all(dir / "a.bin.meta"));
  expect_refused_in_time("verify " + quote(dir / "f.bin"), dir / "f.bin: a FIFO (named pipe), expected a regular file");
  expect_refused_in_time("verify " + quote(dir.path()), dir / "f.bin: a FIFO (named pipe), expected a regular file");
  expect_refused_in_time("merge --output " + quote(dir / "m.bin") + " " + quote(dir / "f.bin"),
                         dir / "f.bin: a FIFO (named pipe), expected a regular file");

  write_all(dir / "g.bin", read_all(dir / "a.bin"));
  REQUIRE(run("mkfifo " + quote(dir / "g.bin.meta")).exit_code == 0);
  expect_refused_in_time("verify " + quote(dir / "g.bin"), dir / "g.bin.meta: a FIFO (named pipe), expected a regular file");
  expect_refused_in_time("stats " + quote(dir / "g.bin"), dir / "g.bin.meta: a FIFO (named pipe), expected a regular file");

  SmallMegatron m;
  std::remove(m.idx.c_str());
  REQUIRE(run("mkfifo " + quote(m.idx)).exit_code == 0);
  expect_refused_in_time("verify " + quote(m.bin), m.idx + ": a FIFO (named pipe), expected a regular file");
}

TEST_CASE("a folder as .bin is named as a folder, not as mmap's 'No such device'") {
  SmallMegatron m;
  const std::string prefix = m.bin.substr(0, m.bin.size() - 4);
  std::remove(m.bin.c_str());
  REQUIRE(run("mkdir " + quote(m.bin)).exit_code == 0);
  expect_refused_in_time("verify " + quote(prefix), m.bin + ": a folder, expected a regular file");
}

TEST_CASE("an .idx symlink loop is reported at the .idx, not as a missing .meta") {
  TempDir dir("corrupt_loop");
  write_all(dir / "x.bin", std::string(4, '\0'));
  REQUIRE(run("ln -s x.idx " + quote(dir / "x.idx")).exit_code == 0);
  expect_refused_in_time("verify " + quote(dir / "x.bin"), "open " + dir / "x.idx: Too many levels of symbolic links");
  expect_refused_in_time("verify " + quote(dir.path()), "open " + dir / "x.idx: Too many levels of symbolic links");
}

TEST_CASE("merge --output that is a folder is refused before any work") {
  SmallShard s;
  REQUIRE(run("mkdir " + quote(s.dir / "out.bin")).exit_code == 0);
  RunResult r = loom_pack("merge --output " + quote(s.dir / "out.bin") + " " + quote(s.bin));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("the output " + s.dir / "out.bin is a folder: a file cannot replace it"));
  CHECK_THAT(r.output, !Catch::Contains("rename"));
  CHECK(sys::list_dir(s.dir / "out.bin").empty());
}
