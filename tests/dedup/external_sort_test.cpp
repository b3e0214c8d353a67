// The external sort under a budget far below its input: many runs spilled and merged, against
// std::sort; the work file around it checked as its header says; a rerun after a killed sort.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include "loom/dedup/external_sort.h"
#include "loom/dedup/work_file.h"
#include "loom/error.h"
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

namespace {
// The bytes of a sort of `n` pairs (unique) under the smallest budget, into prefix; *runs: how many
// runs it spilled.
std::string sorted_bytes(const std::string& prefix, int n, uint64_t* runs) {
  std::mt19937_64 rng(11);
  PairSorter sorter(prefix, 1, true);
  for (int i = 0; i < n; ++i) sorter.add(rng() % 5000, rng() % 3);
  WorkWriter out(prefix, WorkKind::kEdges, sizeof(Pair), 0, 42);
  *runs = sorter.runs() + 1;  // finish() spills the rest
  sorter.finish(out);
  out.commit();
  return test::read_all(prefix);
}
}  // namespace

TEST_CASE("a rerun removes every run file a killed sort left, whatever its number, and nothing else", "[dedup][sort]") {
  test::TempDir dir("dedup_sort_rerun");
  const std::string prefix = dir / "out.pairs";
  // A pid that surely does not run any more: a child that has exited and been reaped.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string host = sys::hostname();
  auto run_file = [&](const std::string& base, const std::string& n, const std::string& h, long pid) {
    return str(base, ".run", n, ".tmp.", h, ".", pid);
  };
  // What a killed sort leaves: runs 0-2 and 40, where the rerun spills 5 runs (0-4).
  const std::vector<std::string> stale = {run_file(prefix, "0", host, dead), run_file(prefix, "1", host, dead),
                                          run_file(prefix, "2", host, dead), run_file(prefix, "40", host, dead)};
  for (const auto& f : stale) test::write_all(f, std::string(4096, '\x5a'));
  // Not this sorter's: a live process's run, another host's, another output's, names it never
  // writes, and a link named as a stale run (left as it is, its target untouched).
  const std::vector<std::string> keep = {
      run_file(prefix, "3", host, ::getppid()),   run_file(prefix, "3", "other-host", dead),
      run_file(dir / "other.pairs", "0", host, dead), run_file(prefix, "07", host, dead),
      run_file(prefix, "", host, dead),           run_file(prefix, "5", host, dead) + ".bak",
      str(prefix, ".runs.tmp.", host, ".", dead), str(prefix, ".run6.tmp.", host, ".x", dead),
      run_file(prefix, "8", host, 0)};
  for (const auto& f : keep) test::write_all(f, "keep");
  test::write_all(dir / "target", "target");
  const std::string link = run_file(prefix, "9", host, dead);
  REQUIRE(::symlink((dir / "target").c_str(), link.c_str()) == 0);

  test::TempDir clean("dedup_sort_clean");
  uint64_t runs = 0;
  const std::string want = sorted_bytes(clean / "out.pairs", 5000, &runs);
  CHECK(sorted_bytes(prefix, 5000, &runs) == want);
  CHECK(runs == 5);  // runs 0-4, of 1,024 pairs
  for (const auto& f : stale) CHECK_FALSE(sys::lexists(f));
  for (const auto& f : keep) CHECK(test::read_all(f) == "keep");
  CHECK(sys::is_symlink(link));
  CHECK(test::read_all(dir / "target") == "target");
  CHECK(sys::list_dir(dir.path()).size() == 1 + keep.size() + 2);  // the output, keep, the link and its target
}
