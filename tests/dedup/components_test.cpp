// Connected components by external sorts (components.h) against an in-memory union-find: random
// graphs, isolated pairs, stars, paths in index order and shuffled, with the smallest sort buffer
// (many spilled runs) and a large one. Every node labelled once, in order, with its component's
// smallest node; the rounds stay logarithmic; the scratch files are gone afterwards.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "loom/dedup/components.h"
#include "loom/dedup/external_sort.h"
#include "loom/dedup/work_file.h"
#include "loom/error.h"
#include "loom/sys.h"
#include "test_util.h"

using namespace loom;
using namespace loom::dedup;

namespace {
using Edges = std::vector<Pair>;

// The reference: union-find over a map of the nodes, each root its component's smallest node.
std::map<uint64_t, uint64_t> reference_labels(const Edges& edges) {
  std::map<uint64_t, uint64_t> parent;
  auto find = [&](uint64_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (const Pair& e : edges) parent.emplace(e.first, e.first), parent.emplace(e.second, e.second);
  for (const Pair& e : edges) {
    const uint64_t a = find(e.first), b = find(e.second);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
  std::map<uint64_t, uint64_t> label;
  for (const auto& [node, p] : parent) label[node] = find(node);
  return label;
}

// The edges as `files` work files (each sorted and unique as the buckets stage writes them; the
// same edge may be in several), labelled with the given budget.
std::map<uint64_t, uint64_t> labels(const test::TempDir& dir, const Edges& edges, size_t files, uint64_t memory,
                                    ComponentStats& stats) {
  std::vector<PairRun> runs;
  for (size_t f = 0; f < files; ++f) {
    Edges part;
    for (size_t i = f; i < edges.size(); i += files) part.push_back(edges[i]);
    if (f == 1) part.insert(part.end(), edges.begin(), edges.begin() + edges.size() / 10);  // repeats
    for (Pair& e : part) e = Pair{std::min(e.first, e.second), std::max(e.first, e.second)};
    std::sort(part.begin(), part.end());
    part.erase(std::unique(part.begin(), part.end()), part.end());
    const std::string path = dir / ("band-" + std::to_string(f) + ".edges");
    WorkWriter w(path, WorkKind::kEdges, sizeof(Pair), 0, 0);
    w.add_many(part.data(), part.size());
    w.commit();
    runs.push_back(PairRun{path, sizeof(WorkHeader), part.size()});
  }
  std::map<uint64_t, uint64_t> got;
  uint64_t last = 0;
  bool ordered = true;
  stats = label_components(runs, dir / "removals.bin", memory, [&](uint64_t node, uint64_t label) {
    ordered = ordered && (got.empty() || node > last);
    last = node;
    got[node] = label;
  });
  CHECK(ordered);
  std::vector<std::string> left = sys::list_dir(dir.path());
  CHECK(left.size() == files);  // only the edge files: no scratch file nor run remains
  for (const auto& r : runs) sys::remove_file(r.path);
  return got;
}

// A document id: sources in the high bits, as the clusters stage passes them.
uint64_t node_id(std::mt19937_64& rng, uint64_t n) { return make_doc(rng() % 5, rng() % n); }

Edges random_graph(uint64_t seed, uint64_t nodes, uint64_t edges) {
  std::mt19937_64 rng(seed);
  Edges e;
  while (e.size() < edges) {
    const uint64_t a = node_id(rng, nodes / 5), b = node_id(rng, nodes / 5);
    if (a != b) e.push_back(Pair{a, b});
  }
  return e;
}

// Many small components: isolated pairs, and stars whose centre is not their smallest node.
Edges pairs_and_stars(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> ids(30000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 7 * i + 3;
  std::shuffle(ids.begin(), ids.end(), rng);
  Edges e;
  size_t k = 0;
  for (; k + 1 < 10000; k += 2) e.push_back(Pair{ids[k], ids[k + 1]});
  while (k + 1 < ids.size()) {
    const uint64_t centre = ids[k++];
    for (size_t leaf = 0; leaf < 1 + rng() % 300 && k < ids.size(); ++leaf) e.push_back(Pair{centre, ids[k++]});
  }
  return e;
}

// A path through `n` nodes: in index order (ids 0, 1, 2, ...), its edges listed from the last, or
// through the ids shuffled.
Edges path(uint64_t n, bool shuffled, uint64_t seed) {
  std::vector<uint64_t> ids(n);
  for (uint64_t i = 0; i < n; ++i) ids[i] = i;
  std::mt19937_64 rng(seed);
  if (shuffled) std::shuffle(ids.begin(), ids.end(), rng);
  Edges e;
  for (uint64_t i = n - 1; i > 0; --i) e.push_back(Pair{ids[i], ids[i - 1]});
  return e;
}

// With a sort buffer of a quarter of the edges (the first sort spills 8 runs, the later ones about
// 4: many runs, but few enough fsyncs for a fast test) and with one that holds everything.
void check_graph(const std::string& name, const Edges& edges, uint64_t path_nodes = 0) {
  const std::map<uint64_t, uint64_t> want = reference_labels(edges);
  for (const uint64_t memory : {edges.size() * sizeof(Pair) / 4, uint64_t{1} << 30}) {
    test::TempDir dir("dedup_components");
    ComponentStats stats;
    const std::map<uint64_t, uint64_t> got = labels(dir, edges, 3, memory, stats);
    INFO(name << ", memory " << memory << ": " << stats.nodes << " nodes, " << stats.rounds << " rounds, "
              << stats.max_runs << " runs");
    CHECK(stats.nodes == want.size());
    CHECK(got == want);
    CHECK((memory < (uint64_t{1} << 30) ? stats.max_runs >= 8 : stats.max_runs == 0));
    if (path_nodes) CHECK(stats.rounds <= 2 + std::log2(double(path_nodes)));  // 18 for 10^5 in index order
    WARN(name << ": " << stats.rounds << " rounds, sorts of up to " << stats.max_runs << " runs at memory " << memory);
  }
}
}  // namespace

TEST_CASE("connected components of random graphs equal union-find's", "[dedup][components]") {
  for (uint64_t seed : {1, 2, 3})  // below, at and above the giant component's threshold
    check_graph("random, seed " + std::to_string(seed), random_graph(seed, 40000, 10000 * seed));
  check_graph("random, dense", random_graph(11, 2000, 30000));
  check_graph("pairs and stars", pairs_and_stars(4));
}

TEST_CASE("connected components of a path of 10^5 nodes in index order: logarithmic rounds", "[dedup][components]") {
  check_graph("a path in index order, edges listed from the last", path(100000, false, 0), 100000);
}

TEST_CASE("connected components of a path of 10^5 shuffled nodes: logarithmic rounds", "[dedup][components]") {
  check_graph("a path through shuffled ids", path(100000, true, 5), 100000);
}

TEST_CASE("connected components of no edges, and an edge joining a node to itself", "[dedup][components]") {
  test::TempDir dir("dedup_components_bad");
  ComponentStats stats;
  CHECK(labels(dir, {}, 1, 1, stats).empty());
  CHECK(stats.nodes == 0);
  const std::string path = dir / "self.edges";
  {
    WorkWriter w(path, WorkKind::kEdges, sizeof(Pair), 0, 0);
    const Pair e[2] = {{1, 2}, {3, 3}};
    w.add_many(e, 2);
    w.commit();
  }
  CHECK_THROWS_WITH(label_components({PairRun{path, sizeof(WorkHeader), 2}}, dir / "x", 1, [](uint64_t, uint64_t) {}),
                    Catch::Contains("self.edges: edge (3, 3) joins a node to itself"));
}
