// The external sort under a budget far below its input: many runs spilled and merged, against
// std::sort; the work file around it checked as its header says.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "loom/dedup/external_sort.h"
#include "loom/dedup/work_file.h"
#include "loom/sys.h"
#include "test_util.h"

using namespace loom;
using namespace loom::dedup;

TEST_CASE("pairs beyond the memory budget are spilled in runs and merged in order", "[dedup][sort]") {
  test::TempDir dir("dedup_sort");
  for (const bool unique : {false, true}) {
    std::mt19937_64 rng(unique ? 7 : 8);
    std::vector<Pair> want;
    PairSorter sorter(dir / "out.pairs", 1, unique);  // the smallest buffer: 1,024 pairs
    for (int i = 0; i < 20000; ++i) {
      const Pair p{rng() % 3000, rng() % 4};  // many equal keys and equal pairs
      want.push_back(p);
      sorter.add(p.first, p.second);
    }
    CHECK(sorter.runs() >= 19);
    std::sort(want.begin(), want.end());
    if (unique) want.erase(std::unique(want.begin(), want.end()), want.end());
    WorkWriter out(dir / "out.pairs", WorkKind::kEdges, sizeof(Pair), 0, 42);
    sorter.finish(out);
    out.commit();
    const WorkReader r(dir / "out.pairs", WorkKind::kEdges, sizeof(Pair));
    r.verify();
    REQUIRE(r.num_records() == want.size());
    CHECK(r.header().params_xxh64 == 42);
    bool same = true;
    for (uint64_t i = 0; i < r.num_records(); ++i) same &= r.record(i)[0] == want[i].first && r.record(i)[1] == want[i].second;
    CHECK(same);
    CHECK(sys::list_dir(dir.path()) == std::vector<std::string>{"out.pairs"});  // the runs are gone
  }
}

TEST_CASE("a work file that is truncated, of another kind or damaged is refused, naming it", "[dedup][sort]") {
  test::TempDir dir("dedup_workfile");
  const std::string path = dir / "e.edges";
  {
    WorkWriter w(path, WorkKind::kEdges, sizeof(Pair), 3, 9);
    const Pair p[2] = {{1, 2}, {3, 4}};
    w.add_many(p, 2);
    w.commit();
  }
  CHECK(work_file_done(path, WorkKind::kEdges, sizeof(Pair), 9));
  CHECK(!work_file_done(path, WorkKind::kEdges, sizeof(Pair), 10));  // other params
  CHECK_THROWS_WITH(WorkReader(path, WorkKind::kBandKeys, sizeof(Pair)), Catch::Contains("e.edges: holds kind 3, expected 2"));
  std::string bytes = test::read_all(path);
  bytes[64 + 5] ^= 1;
  test::write_all(path, bytes);
  CHECK_THROWS_WITH(WorkReader(path, WorkKind::kEdges, sizeof(Pair)).verify(), Catch::Contains("records checksum"));
  CHECK(!work_file_done(path, WorkKind::kEdges, sizeof(Pair), 9));
  test::write_all(path, bytes.substr(0, bytes.size() - 8));
  CHECK_THROWS_WITH(WorkReader(path, WorkKind::kEdges, sizeof(Pair)), Catch::Contains("truncated"));
  bytes[0] = 'X';
  test::write_all(path, bytes);
  CHECK_THROWS_WITH(WorkReader(path, WorkKind::kEdges, sizeof(Pair)), Catch::Contains("bad magic"));
}
