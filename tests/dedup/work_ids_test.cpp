// loom-dedup does not trust the document ids in its work files (the work folder is shared: outside
// bytes). One test per corruption mode: a finished run's work folder is copied, one record of a
// work file forged and its records checksum recomputed (so every header check passes), and the
// stage that reads the file is run again: exit 1, a message naming the file, the record and what
// was expected, and no output of that stage replaced.
#include <catch2/catch.hpp>

#include <cstring>

#include "fixtures.h"
#include "loom/dedup/work_file.h"
#include "loom/hash.h"
#include "loom/json_text.h"
#include "loom/sys.h"

using namespace loom;
using namespace loom::test;
using dedup::make_doc;

namespace {
// Work files as work_file.h lays them out: a 64-byte header (record_bytes at 16, num_records at
// 24, records_xxh64 at 40), then the records.
uint64_t get_u64(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, bytes.data() + at, 8);
  return v;
}
void put_u64(std::string& bytes, size_t at, uint64_t v) { std::memcpy(&bytes[at], &v, 8); }
uint32_t record_bytes(const std::string& bytes) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + 16, 4);
  return v;
}
// The file with its records checksum recomputed: only the stages' own checks can refuse it.
void write_forged(const std::string& path, std::string bytes) {
  put_u64(bytes, 40, xxh64(bytes.data() + 64, bytes.size() - 64));
  write_all(path, bytes);
}
uint64_t num_records(const std::string& path) { return get_u64(read_all(path), 24); }
uint64_t field(const std::string& path, uint64_t record, size_t f) {
  const std::string bytes = read_all(path);
  return get_u64(bytes, 64 + record * record_bytes(bytes) + 8 * f);
}
void forge(const std::string& path, uint64_t record, size_t f, uint64_t value) {
  std::string bytes = read_all(path);
  put_u64(bytes, 64 + record * record_bytes(bytes) + 8 * f, value);
  write_forged(path, bytes);
}

// Sources: the reference set r.bin (0), the inputs a.bin (1) and b.bin (2, 43 documents: copies
// of r's document 3 and a's 5 at indices 40 and 41, a near copy at 42, document 10 contaminated).
struct Corpus {
  TempDir dir{"dedup_work_ids"};
  Corpus() {
    const Docs& d = botchan_docs();
    Docs b(d.begin() + 60, d.begin() + 100);
    b.push_back(d[3]);
    b.push_back(d[25]);
    b.push_back(perturb(d[30], 45));
    write_shard(dir / "in/r.bin", Docs(d.begin(), d.begin() + 20));
    write_shard(dir / "in/a.bin", Docs(d.begin() + 20, d.begin() + 60));
    write_shard(dir / "in/b.bin", b);
    write_all(dir / "eval.jsonl", "{\"text\": \"An unrelated question about the boiling point of water?\"}\n" +
                                      std::string("{\"text\": ") + json_quote(longest_line(70)) + "}\n");
    const RunResult r = loom_dedup(args("base"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    // What the forgeries below assume: document 10 of b contaminated (removed), the last removal a duplicate.
    REQUIRE(field(dir / "base/work/sources/00002.contam", 0, 0) == make_doc(2, 10));
    const std::string removals = dir / "base/work/removals.bin";
    REQUIRE(num_records(removals) >= 3);
    REQUIRE(field(removals, 0, 0) == make_doc(2, 10));
    REQUIRE(field(removals, 0, 2) == 3);
    REQUIRE(field(removals, num_records(removals) - 1, 2) <= 2);
  }
  std::string args(const std::string& run) const {
    return "--eval " + quote(dir / "eval.jsonl") + " --model " + quote(internlm_model()) + " --reference " +
           quote(dir / "in/r.bin") + " --work-dir " + quote(dir / (run + "/work")) + " --output-dir " +
           quote(dir / (run + "/out")) + " " + quote(dir / "in/a.bin") + " " + quote(dir / "in/b.bin");
  }
  // A copy of the base run, to forge one file of.
  std::string work(const std::string& run) const {
    REQUIRE(test::run("cp -a " + quote(dir / "base") + " " + quote(dir / run)).exit_code == 0);
    return dir / (run + "/work");
  }
  // Every file of a folder of the run, named, with the XXH64 of its bytes.
  std::vector<std::string> files(const std::string& run, const std::string& sub) const {
    std::vector<std::string> out;
    const std::string folder = dir / (run + "/" + sub);
    for (const std::string& f : sys::list_dir(folder))
      if (!sys::is_directory(folder + "/" + f)) out.push_back(f + ": " + hex64(xxh64_file(folder + "/" + f)));
    return out;
  }
};

Corpus& corpus() {
  static Corpus c;
  return c;
}

// One forged record: field `field` of record `record` (kLast: the last) of `file` (under the work
// folder) set to `value`; `stage` run again must refuse it naming record `named` (kLast: the last)
// and `expected`, and leave the files of `outputs` (folders of the run) as they were.
constexpr uint64_t kLast = dedup::kNoDoc;
struct Forgery {
  std::string file;
  uint64_t record;
  size_t field;
  uint64_t value;
  std::string stage;
  uint64_t named;
  std::string expected;
  std::vector<std::string> outputs;
};

void require_refused(const std::string& run, const Forgery& f) {
  const Corpus& c = corpus();
  const std::string path = c.work(run) + "/" + f.file;
  const uint64_t last = num_records(path) - 1;
  forge(path, f.record == kLast ? last : f.record, f.field, f.value);
  std::vector<std::vector<std::string>> before;
  for (const std::string& o : f.outputs) before.push_back(c.files(run, o));
  const RunResult r = loom_dedup(c.args(run) + " --stage " + f.stage);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  const uint64_t named = f.named == kLast ? last : f.named;
  CHECK(r.output.find(path + ": record " + std::to_string(named) + ": ") != std::string::npos);
  CHECK(r.output.find(f.expected) != std::string::npos);
  for (size_t k = 0; k < f.outputs.size(); ++k) CHECK(c.files(run, f.outputs[k]) == before[k]);
}
}  // namespace

TEST_CASE("work ids: a band keys file with a document out of range, of another source or unsorted", "[dedup][e2e]") {
  const std::string band = "sources/00002.band-3";
  const std::vector<std::string> edges = {"work/edges"};
  SECTION("source") {
    require_refused("band-source", {band, kLast, 1, make_doc(5, 2), "buckets", kLast, "expected a source < 3", edges});
  }
  SECTION("index") {
    require_refused("band-index",
                    {band, kLast, 1, make_doc(2, 143), "buckets", kLast, "expected an index < 43", edges});
  }
  SECTION("another source's document") {
    require_refused("band-other", {band, kLast, 1, make_doc(1, 0), "buckets", kLast, "expected a document of source 2",
                                   edges});
  }
  SECTION("order") {  // the first key made the largest: the second record is out of order
    require_refused("band-order", {band, 0, 0, ~uint64_t{0}, "buckets", 1, "expected sorted by key, then document",
                                   edges});
  }
}

TEST_CASE("work ids: a signatures file with fewer records than its source's documents", "[dedup][e2e]") {
  const Corpus& c = corpus();
  const std::string sig = c.work("sig-short") + "/sources/00002.sig";
  std::string bytes = read_all(sig);
  bytes.resize(bytes.size() - record_bytes(bytes));
  put_u64(bytes, 24, get_u64(bytes, 24) - 1);
  write_forged(sig, bytes);
  const auto before = c.files("sig-short", "work/edges");
  const RunResult r = loom_dedup(c.args("sig-short") + " --stage buckets");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find(sig + ": 42 records, expected 43 (one per document of " + c.dir.path() + "/in/b.bin)") !=
        std::string::npos);
  CHECK(c.files("sig-short", "work/edges") == before);
}

TEST_CASE("work ids: an edges file with a pair out of range or not a < b", "[dedup][e2e]") {
  const std::string edges = "edges/band-exact.edges";
  const std::vector<std::string> outputs = {"work", "out"};
  SECTION("a >= b") {
    const uint64_t a = field(corpus().dir / "base/work/" + edges, 0, 0);
    REQUIRE(dedup::doc_index(a) > 0);
    require_refused("edges-order", {edges, 0, 1, a - 1, "clusters", 0, "expected a < b", outputs});
  }
  SECTION("source of b") {
    require_refused("edges-source", {edges, 0, 1, make_doc(7, 0), "clusters", 0, "expected a source < 3", outputs});
  }
  SECTION("index of a") {
    require_refused("edges-index", {edges, 0, 0, make_doc(1, 4000), "clusters", 0, "expected an index < 40", outputs});
  }
}

TEST_CASE("work ids: a contamination file with a document or eval item out of range", "[dedup][e2e]") {
  const std::string contam = "sources/00002.contam";
  const std::vector<std::string> outputs = {"work", "out"};
  SECTION("eval item") {
    require_refused("contam-item", {contam, 0, 1, 2, "clusters", 0, "expected an item < 2", outputs});
  }
  SECTION("index") {
    require_refused("contam-index",
                    {contam, 0, 0, make_doc(2, 4000), "clusters", 0, "expected an index < 43", outputs});
  }
  SECTION("another source's document") {
    require_refused("contam-other", {contam, 0, 0, make_doc(1, 3), "clusters", 0, "expected a document of source 2",
                                     outputs});
  }
}

TEST_CASE("work ids: a removals file with a record out of range, out of order or of a reference", "[dedup][e2e]") {
  const std::string removals = "removals.bin";
  const std::vector<std::string> outputs = {"out", "work/sources"};
  SECTION("a reference's document") {
    require_refused("rm-reference",
                    {removals, 0, 0, make_doc(0, 3), "apply", 0, "expected an input's document", outputs});
  }
  SECTION("order") {
    const uint64_t doc = field(corpus().dir / "base/work/removals.bin", 0, 0);
    require_refused("rm-order", {removals, 1, 0, doc, "apply", 1, "expected documents in strictly increasing order",
                                 outputs});
  }
  SECTION("reason") {
    require_refused("rm-reason", {removals, 0, 2, 7, "apply", 0, "expected a reason of 1 to 4", outputs});
  }
  SECTION("matched document") {
    require_refused("rm-matched", {removals, kLast, 1, make_doc(1, 999), "apply", kLast, "expected an index < 40",
                                   outputs});
  }
  SECTION("index, in the report") {  // the clusters stage keeps the file (its checksum matches) and reports it
    require_refused("rm-report", {removals, kLast, 0, make_doc(2, 500), "clusters", kLast, "expected an index < 43",
                                  {"work", "out"}});
  }
}
