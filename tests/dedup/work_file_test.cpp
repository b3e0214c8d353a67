// loom-dedup's work files (work_file.h): files laid out byte by byte from the specification (not by
// WorkWriter) read back, and one test per corruption mode, each refused with a message that names
// the file and what was expected. The fuzz target fuzz_dedup_work_file runs the same reader.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "loom/dedup/work_file.h"
#include "loom/error.h"
#include "loom/hash.h"
#include "test_util.h"

using namespace loom;
using namespace loom::dedup;

namespace {
void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i) & 0xff));
}
void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i) & 0xff));
}

// A work file as the layout above WorkHeader specifies it: header fields in order, then records.
struct Forge {
  std::string magic = std::string("LOOMDDP\0", 8);
  uint32_t version = 1, kind = 3, record_bytes = 16, aux = 0;
  std::vector<uint64_t> fields = {1, 2, 3, 4};  // the records' u64s
  std::string reserved = std::string(16, '\0');
  bool count_set = false, checksum_set = false;
  uint64_t count = 0, checksum = 0;
  std::string bytes() const {
    std::string body;
    for (uint64_t v : fields) put_u64(body, v);
    std::string s = magic;
    put_u32(s, version), put_u32(s, kind), put_u32(s, record_bytes), put_u32(s, aux);
    put_u64(s, count_set ? count : body.size() / (record_bytes ? record_bytes : 1));
    put_u64(s, 0x5eed);
    put_u64(s, checksum_set ? checksum : xxh64(body.data(), body.size()));
    return s + reserved + body;
  }
};

std::string refusal(const std::string& path, const std::string& bytes, WorkKind kind = WorkKind::kEdges,
                    uint32_t record_bytes = 16) {
  test::write_all(path, bytes);
  try {
    WorkReader(path, kind, record_bytes).verify();
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}
}  // namespace

TEST_CASE("work files laid out by hand read back as their specification says", "[dedup][workfile]") {
  test::TempDir dir("dedup_wf_read");
  Forge sig;
  sig.kind = 1, sig.aux = 2, sig.record_bytes = 40;
  sig.fields = {5, 11, 12, 7, 9, 0, 13, 14, ~uint64_t{0}, 6};
  test::write_all(dir / "s.sig", sig.bytes());
  const WorkReader s(dir / "s.sig", WorkKind::kSignatures, 40);
  s.verify();
  REQUIRE(s.num_records() == 2);
  CHECK(s.header().aux == 2);
  CHECK(s.header().params_xxh64 == 0x5eed);
  CHECK(s.record(1)[0] == 0);
  CHECK(s.record(1)[3] == ~uint64_t{0});
  CHECK(s.record(1)[4] == 6);

  Forge rem;  // a removal: six u64s, then the estimate and Jaccard as float64
  rem.kind = 5, rem.record_bytes = 64;
  double est = 0.875, jac = NAN;
  uint64_t est_bits = 0, jac_bits = 0;
  std::memcpy(&est_bits, &est, 8), std::memcpy(&jac_bits, &jac, 8);
  rem.fields = {make_doc(1, 2), make_doc(0, 0), 2, 0, 0, 0, est_bits, jac_bits};
  test::write_all(dir / "removals.bin", rem.bytes());
  const WorkReader r(dir / "removals.bin", WorkKind::kRemovals, 64);
  r.verify();
  REQUIRE(r.num_records() == 1);
  CHECK(doc_source(r.record(0)[0]) == 1);
  CHECK(doc_index(r.record(0)[0]) == 2);
  double got = 0;
  std::memcpy(&got, &r.record(0)[6], 8);
  CHECK(got == 0.875);
  std::memcpy(&got, &r.record(0)[7], 8);
  CHECK(std::isnan(got));

  Forge empty;
  empty.fields.clear();
  test::write_all(dir / "e.edges", empty.bytes());
  CHECK(work_file_done(dir / "e.edges", WorkKind::kEdges, 16, 0x5eed));
  CHECK(WorkReader(dir / "e.edges", WorkKind::kEdges, 16).num_records() == 0);
}

TEST_CASE("a work file shorter than its header is refused, naming it", "[dedup][workfile]") {
  test::TempDir dir("dedup_wf_short");
  CHECK_THAT(refusal(dir / "a.edges", Forge().bytes().substr(0, 40)),
             Catch::Contains("a.edges: 40 bytes, shorter than the 64-byte header"));
  CHECK_THAT(refusal(dir / "b.edges", ""), Catch::Contains("b.edges: 0 bytes, shorter"));
}

TEST_CASE("a work file of another magic, version or kind is refused, naming it", "[dedup][workfile]") {
  test::TempDir dir("dedup_wf_ident");
  Forge f;
  f.magic = std::string("LOOMDDQ\0", 8);
  CHECK_THAT(refusal(dir / "m.edges", f.bytes()), Catch::Contains("m.edges: not a loom-dedup work file (bad magic)"));
  f = Forge();
  f.version = 2;
  CHECK_THAT(refusal(dir / "v.edges", f.bytes()), Catch::Contains("v.edges: work file version 2, this build reads 1"));
  f = Forge();
  f.kind = 9;
  CHECK_THAT(refusal(dir / "k.edges", f.bytes()), Catch::Contains("k.edges: holds kind 9, expected 3 (edges)"));
}

TEST_CASE("a work file whose records are of another size is refused, naming it", "[dedup][workfile]") {
  test::TempDir dir("dedup_wf_size");
  Forge f;
  f.record_bytes = 24;
  f.fields = {1, 2, 3};
  CHECK_THAT(refusal(dir / "r.edges", f.bytes()), Catch::Contains("r.edges: records of 24 bytes, expected 16"));
  f = Forge();
  f.record_bytes = 0;
  CHECK_THAT(refusal(dir / "z.edges", f.bytes()), Catch::Contains("z.edges: records of 0 bytes, expected 16"));
}

TEST_CASE("a signatures file whose hash count disagrees with its record size is refused", "[dedup][workfile]") {
  test::TempDir dir("dedup_wf_aux");
  Forge f;
  f.kind = 1, f.record_bytes = 40, f.aux = 3;  // 40 bytes: 3 + 2 hashes, not 3
  f.fields = {5, 11, 12, 7, 9};
  CHECK_THAT(refusal(dir / "s.sig", f.bytes(), WorkKind::kSignatures, 40),
             Catch::Contains("s.sig: 3 hashes a signature (aux), but records of 40 bytes hold 2"));
}

TEST_CASE("a work file whose record count does not match its size is refused, naming it", "[dedup][workfile]") {
  test::TempDir dir("dedup_wf_count");
  Forge f;
  f.count_set = true;
  f.count = 3;  // two records present
  CHECK_THAT(refusal(dir / "t.edges", f.bytes()),
             Catch::Contains("t.edges: 3 records of 16 bytes, more than the 96-byte file holds (truncated?)"));
  f.count = 1;
  CHECK_THAT(refusal(dir / "p.edges", f.bytes()),
             Catch::Contains("p.edges: 96 bytes, expected 80 for 1 records of 16 bytes (trailing bytes?)"));
  // 2^60 + 2 records of 16 bytes: 2^64 + 32, which wraps to the 32 bytes present.
  f.count = (uint64_t{1} << 60) + 2;
  CHECK_THAT(refusal(dir / "w.edges", f.bytes()),
             Catch::Contains("w.edges: 1152921504606846978 records of 16 bytes, more than the 96-byte file holds"));
  f.count = ~uint64_t{0};
  CHECK_THAT(refusal(dir / "x.edges", f.bytes()),
             Catch::Contains("x.edges: 18446744073709551615 records of 16 bytes, more than the 96-byte file holds"));
}

TEST_CASE("a work file with reserved header bytes set is refused, naming it", "[dedup][workfile]") {
  test::TempDir dir("dedup_wf_reserved");
  Forge f;
  f.reserved[15] = 1;
  CHECK_THAT(refusal(dir / "r.edges", f.bytes()),
             Catch::Contains("r.edges: reserved header bytes 48-63 are not zero (written by a newer loom-dedup?)"));
}

TEST_CASE("a work file whose records do not match their checksum is refused by verify, naming it",
          "[dedup][workfile]") {
  test::TempDir dir("dedup_wf_sum");
  Forge f;
  f.checksum_set = true;
  f.checksum = 1;
  const std::string path = dir / "c.edges";
  CHECK_THAT(refusal(path, f.bytes()), Catch::Contains("c.edges: records checksum"));
  CHECK_THAT(refusal(path, f.bytes()), Catch::Contains("the header says 0000000000000001 (corrupted)"));
  CHECK_NOTHROW(WorkReader(path, WorkKind::kEdges, 16));  // the header alone is sound
  CHECK_FALSE(work_file_done(path, WorkKind::kEdges, 16, 0x5eed));
}

TEST_CASE("a work file WorkWriter wrote is done for its params, and refused once truncated, of another kind or damaged",
          "[dedup][workfile]") {
  test::TempDir dir("dedup_workfile");
  const std::string path = dir / "e.edges";
  {
    WorkWriter w(path, WorkKind::kEdges, 16, 3, 9);
    const uint64_t p[4] = {1, 2, 3, 4};
    w.add_many(p, 2);
    w.commit();
  }
  CHECK(work_file_done(path, WorkKind::kEdges, 16, 9));
  CHECK(!work_file_done(path, WorkKind::kEdges, 16, 10));  // other params
  CHECK_THROWS_WITH(WorkReader(path, WorkKind::kBandKeys, 16), Catch::Contains("e.edges: holds kind 3, expected 2"));
  std::string bytes = test::read_all(path);
  bytes[64 + 5] ^= 1;
  test::write_all(path, bytes);
  CHECK_THROWS_WITH(WorkReader(path, WorkKind::kEdges, 16).verify(), Catch::Contains("records checksum"));
  CHECK(!work_file_done(path, WorkKind::kEdges, 16, 9));
  test::write_all(path, bytes.substr(0, bytes.size() - 8));
  CHECK_THROWS_WITH(WorkReader(path, WorkKind::kEdges, 16), Catch::Contains("truncated"));
  bytes[0] = 'X';
  test::write_all(path, bytes);
  CHECK_THROWS_WITH(WorkReader(path, WorkKind::kEdges, 16), Catch::Contains("bad magic"));
}
