#include "loom/dedup/components.h"

#include <algorithm>

#include "loom/dedup/external_sort.h"
#include "loom/dedup/work_file.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"

namespace loom::dedup {

ScratchFiles::~ScratchFiles() {
  for (const auto& p : paths_) {
    try {
      sys::remove_file(p);
    } catch (const std::exception& e) {
      log::warn(e.what(), "; left behind");
    }
  }
}

PairRun write_sorted(PairSorter& sorter, const std::string& path) {
  WorkWriter out(path, WorkKind::kEdges, sizeof(Pair), 0, 0);
  sorter.finish(out);
  out.commit();
  return PairRun{path, sizeof(WorkHeader), out.num_records()};
}

namespace {
// S: every input edge in both directions.
PairRun both_directions(const std::vector<PairRun>& edges, const std::string& path, uint64_t memory,
                        ComponentStats& stats) {
  PairSorter sorter(path, memory, true);
  uint64_t total = 0;
  for (const PairRun& run : edges) total += run.count;
  Progress progress("connected components: the edges both ways", total, "edges");
  for (const PairRun& run : edges)
    for (PairStream e(run.path, run.offset, run.count); !e.done(); e.next(), progress.add(1)) {
      const Pair p = e.head();
      LOOM_CHECK(p.first != p.second, run.path, ": edge (", p.first, ", ", p.second,
                 ") joins a node to itself; expected two different nodes");
      sorter.add(p.first, p.second);
      sorter.add(p.second, p.first);
    }
  stats.max_runs = std::max(stats.max_runs, sorter.runs());
  return write_sorted(sorter, path);
}

// The large-star pass over S, written to `path`; false, and nothing written, when S is already a
// forest of stars centred on their smallest nodes.
bool large_star(const PairRun& s, const std::string& path, uint64_t memory, ComponentStats& stats, PairRun& a) {
  PairSorter sorter(path, memory, true);
  Progress progress(str("connected components: round ", stats.rounds + 1, ", large-star"), s.count, "edges");
  bool stars = true;
  uint64_t nodes = 0;
  for (PairStream in(s.path, s.offset, s.count); !in.done(); ++nodes) {
    const uint64_t u = in.head().first, m = std::min(u, in.head().second);  // neighbours come sorted
    uint64_t degree = 0;
    for (; !in.done() && in.head().first == u; in.next(), ++degree)
      if (in.head().second > u) sorter.add(in.head().second, m);
    stars = stars && (m == u || degree == 1);
    progress.add(degree);
  }
  if (stats.rounds++ == 0) stats.nodes = nodes, stats.edges = s.count / 2;
  if (stars) return false;
  stats.max_runs = std::max(stats.max_runs, sorter.runs());
  a = write_sorted(sorter, path);
  return true;
}

// The small-star pass over A (larger node, smaller node), written to `path` in both directions.
PairRun small_star(const PairRun& a, const std::string& path, uint64_t memory, ComponentStats& stats) {
  PairSorter sorter(path, memory, true);
  Progress progress(str("connected components: round ", stats.rounds, ", small-star"), a.count, "edges");
  auto join = [&](uint64_t v, uint64_t m) { sorter.add(v, m), sorter.add(m, v), progress.add(1); };
  for (PairStream in(a.path, a.offset, a.count); !in.done();) {
    const uint64_t u = in.head().first, m = in.head().second;  // m: u's smallest neighbour
    join(u, m);
    for (in.next(); !in.done() && in.head().first == u; in.next()) join(in.head().second, m);
  }
  stats.max_runs = std::max(stats.max_runs, sorter.runs());
  return write_sorted(sorter, path);
}
}  // namespace

ComponentStats label_components(const std::vector<PairRun>& edges, const std::string& scratch, uint64_t memory_bytes,
                                const std::function<void(uint64_t node, uint64_t label)>& label) {
  const std::string sym = scratch + ".cc-sym", large = scratch + ".cc-large";
  ScratchFiles remove_at_end({sym, large});
  ComponentStats stats;
  PairRun s = both_directions(edges, sym, memory_bytes, stats), a;
  while (large_star(s, large, memory_bytes, stats, a)) {
    s = small_star(a, sym, memory_bytes, stats);
    log::info("connected components: round ", stats.rounds, ", ", s.count / 2, " edges left");
  }
  for (PairStream in(s.path, s.offset, s.count); !in.done();) {
    const uint64_t u = in.head().first;
    label(u, std::min(u, in.head().second));
    while (!in.done() && in.head().first == u) in.next();
  }
  log::info("connected components: ", stats.nodes, " nodes, ", stats.edges, " edges, ", stats.rounds,
            " rounds, at most ", stats.max_runs, " runs a sort");
  return stats;
}

}  // namespace loom::dedup
