// Connected components of a graph larger than memory, by external sorts only: alternating
// large-star and small-star (Kiveris, Lattanzi, Mirrokni, Rastogi, Vassilvitskii, "Connected
// Components in MapReduce and Beyond", SoCC 2014).
//
// The graph is kept as a file of its edges, each pass a scan of a sorted edge file that feeds a
// PairSorter (external_sort.h) whose output is the next pass's input:
//   start       S: every edge in both directions, (u, v) and (v, u), sorted and unique.
//   large-star  per node u of S with neighbours N(u): m = min(N(u) + u); every neighbour v > u is
//               joined to m instead of u. Output A: the edges (v, m) with v > m, sorted and unique.
//   small-star  per node u of A with its smaller neighbours N'(u): m = min N'(u); u and every other
//               w of N'(u) are joined to m. Output: S again, both directions.
// Both keep every node and every component, and neither adds edges. A round is a large-star then
// a small-star; they stop when S is a forest of stars, each centred on its smallest node (every
// node with a smaller neighbour has exactly one neighbour), which the large-star pass checks as it
// reads S. A node's label is then the smallest of itself and its neighbours. Rounds: O(log^2 n) in
// the paper's bound, about log2 of the longest path in practice (a path of 10^5 nodes: 18 large-star
// passes in index order, 14 shuffled; components_test.cpp).
//
// Memory: one sort buffer of memory_bytes (PairSorter) and 256 KiB per spilled run, whatever the
// graph's size. Disk: S and A under `scratch` + ".cc-sym" and ".cc-large" (work files of pairs,
// replaced each round, so a rerun after a kill overwrites them), plus the sorts' runs; both are
// removed when label_components returns or throws.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loom::dedup {

// `count` pairs of u64 stored from byte `offset` of `path`, sorted.
struct PairRun {
  std::string path;
  uint64_t offset = 0, count = 0;
};

struct ComponentStats {
  uint64_t nodes = 0, edges = 0;  // of the input, edges counted once
  uint64_t rounds = 0;            // large-star passes, the last one finding stars
  uint64_t max_runs = 0;          // the most runs any of the sorts spilled
};

// Calls label(node, smallest node of its component) for every node of the undirected graph whose
// edges (a, b), a != b, are in `edges` (in any order; an edge may repeat, within a run or across
// runs), in increasing order of node, each once.
ComponentStats label_components(const std::vector<PairRun>& edges, const std::string& scratch, uint64_t memory_bytes,
                                const std::function<void(uint64_t node, uint64_t label)>& label);

class PairSorter;
// The sorter's pairs, in order, written to `path` (a work file of kind 3's layout, params 0).
PairRun write_sorted(PairSorter& sorter, const std::string& path);

// Removes the files it names when it goes out of scope (scratch files of a stage).
class ScratchFiles {
 public:
  explicit ScratchFiles(std::vector<std::string> paths) : paths_(std::move(paths)) {}
  ~ScratchFiles();
  ScratchFiles(const ScratchFiles&) = delete;
  ScratchFiles& operator=(const ScratchFiles&) = delete;

 private:
  std::vector<std::string> paths_;
};

}  // namespace loom::dedup
