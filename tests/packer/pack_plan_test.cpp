// The pack planners on exact small cases, on properties over random length distributions, and
// bestfit against an independent best-fit-decreasing written in Python by the test.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "fixtures.h"
#include "loom/packer/pack_plan.h"

using namespace loom;
using namespace loom::packer;

namespace {

using Seg = std::tuple<uint64_t, uint32_t, uint32_t, bool>;  // doc, doc_pos, length, ends_doc
using Pack = std::vector<Seg>;

std::vector<Pack> packs_of(const PackPlan& plan) {
  std::vector<Pack> out;
  for (uint64_t p = 0; p < plan.num_packs(); ++p) {
    out.emplace_back();
    for (uint64_t s = plan.pack_offsets[p]; s < plan.pack_offsets[p + 1]; ++s) {
      const PlannedSegment& g = plan.segments[s];
      out.back().emplace_back(g.doc, g.doc_pos, g.length, g.ends_doc);
    }
  }
  return out;
}

std::vector<Pack> sorted(std::vector<Pack> packs) {
  std::sort(packs.begin(), packs.end());
  return packs;
}

uint64_t fill(const Pack& p) {
  uint64_t n = 0;
  for (const Seg& s : p) n += std::get<2>(s);
  return n;
}

// Every non-empty document is tiled exactly once by its segments, in doc_pos order, and only its
// last segment ends it; no pack holds more than L tokens or an empty segment.
void check_conservation(const std::vector<uint64_t>& lens, const PackPlan& plan) {
  std::map<uint64_t, std::vector<std::tuple<uint32_t, uint32_t, bool>>> by_doc;
  for (const Pack& p : packs_of(plan)) {
    REQUIRE(fill(p) <= plan.seq_len);
    REQUIRE(!p.empty());
    for (const auto& [doc, pos, len, ends] : p) {
      REQUIRE(len > 0);
      by_doc[doc].emplace_back(pos, len, ends);
    }
  }
  uint64_t nonempty = 0, tokens = 0;
  for (uint64_t d = 0; d < lens.size(); ++d) {
    if (lens[d] == 0) {
      REQUIRE(by_doc.count(d) == 0);
      continue;
    }
    ++nonempty;
    tokens += lens[d];
    auto segs = by_doc.at(d);
    std::sort(segs.begin(), segs.end());
    uint64_t at = 0;
    for (size_t i = 0; i < segs.size(); ++i) {
      REQUIRE(std::get<0>(segs[i]) == at);
      at += std::get<1>(segs[i]);
      REQUIRE(std::get<2>(segs[i]) == (i + 1 == segs.size()));
    }
    REQUIRE(at == lens[d]);
  }
  CHECK(by_doc.size() == nonempty);
  CHECK(plan.num_tokens == tokens);
  CHECK(plan.nonempty_docs == nonempty);
}

std::vector<uint64_t> random_lengths(uint64_t seed, size_t n, uint32_t L) {
  std::mt19937_64 rng(seed);
  std::geometric_distribution<uint64_t> geo(1.0 / (1.0 + L * 0.4));
  std::vector<uint64_t> lens(n);
  for (auto& x : lens) x = rng() % 10 == 0 ? 0 : geo(rng) + (rng() % 50 == 0 ? 3 * L : 0);
  return lens;
}

}  // namespace

TEST_CASE("concat cuts every L and continues the remainder, as pack_sample_into_one") {
  const PackPlan plan = plan_concat({5, 3, 0, 6}, 4);
  CHECK(packs_of(plan) == std::vector<Pack>{{{0, 0, 4, false}},
                                            {{0, 4, 1, true}, {1, 0, 3, true}},
                                            {{3, 0, 4, false}},
                                            {{3, 4, 2, true}}});
  CHECK(plan.num_tokens == 14);
  CHECK(plan.padding_tokens() == 2);
  CHECK(plan.padding_fraction() == 2.0 / 16);
  CHECK(plan.truncated_docs == 2);
  CHECK(plan.truncated_fraction() == 2.0 / 3);
}

namespace {

// concat written token by token: the reference for ConcatCut and plan_concat.
std::vector<Pack> concat_reference(const std::vector<uint64_t>& lens, uint32_t L) {
  std::vector<Pack> packs;
  uint64_t fill = L;
  for (uint64_t d = 0; d < lens.size(); ++d) {
    for (uint64_t pos = 0; pos < lens[d]; ++pos) {
      if (fill == L) {
        packs.emplace_back();
        fill = 0;
      }
      Pack& p = packs.back();
      if (p.empty() || std::get<0>(p.back()) != d) p.emplace_back(d, static_cast<uint32_t>(pos), 0, false);
      ++std::get<2>(p.back());
      std::get<3>(p.back()) = pos + 1 == lens[d];
      ++fill;
    }
  }
  return packs;
}

}  // namespace

TEST_CASE("concat's cut, streamed pack by pack, is plan_concat's and a token-by-token reference") {
  for (uint32_t L : {1u, 2u, 7u, 128u, 2048u}) {
    for (uint64_t seed : {1u, 2u, 3u, 4u}) {
      std::vector<uint64_t> lens = random_lengths(seed * 1000 + L, seed == 4 ? 300 : 2000, L);
      if (seed == 3) lens.insert(lens.begin(), {0, 0, 5 * uint64_t{L}, L, 0});  // empty first, whole packs
      if (seed == 4) lens.insert(lens.end(), {0, 3 * uint64_t{L} + 1, 0, 0});   // a long last, empty after
      const std::vector<Pack> ref = concat_reference(lens, L);
      const PackPlan plan = plan_concat(lens, L);
      CHECK(packs_of(plan) == ref);
      // The stream: every pack's segments, and a second cut that only counts them.
      ConcatCut cut(lens, L), counts(lens, L);
      std::vector<Pack> streamed;
      std::vector<uint64_t> offsets{0};
      for (;;) {
        Pack p;
        const uint64_t n = cut.next_pack([&](uint64_t d, uint32_t pos, uint32_t len, bool ends) { p.emplace_back(d, pos, len, ends); });
        REQUIRE(n == p.size());
        REQUIRE(counts.next_pack([](auto...) {}) == n);
        if (n == 0) break;
        streamed.push_back(p);
        offsets.push_back(offsets.back() + n);
      }
      CHECK(cut.next_pack([](auto...) {}) == 0);
      CHECK(streamed == ref);
      CHECK(offsets == plan.pack_offsets);
      for (const ConcatCut* c : {&cut, &counts}) {
        CHECK(c->num_tokens() == plan.num_tokens);
        CHECK(c->nonempty_docs() == plan.nonempty_docs);
        CHECK(c->truncated_docs() == plan.truncated_docs);
      }
      uint64_t truncated = 0;
      std::map<uint64_t, int> segs_per_doc;
      for (const Pack& p : ref)
        for (const Seg& g : p) ++segs_per_doc[std::get<0>(g)];
      for (const auto& [doc, n] : segs_per_doc) truncated += n > 1;
      CHECK(plan.truncated_docs == truncated);
    }
  }
  const std::vector<uint64_t> none{0, 0}, one{1};
  ConcatCut empty(none, 4);
  CHECK(empty.next_pack([](auto...) {}) == 0);
  CHECK(empty.num_tokens() == 0);
  CHECK_THROWS_WITH(ConcatCut(one, 0), Catch::Contains("--seq-len must be positive"));
}

TEST_CASE("bestfit packs longest first into the tightest pack, cuts only documents longer than L") {
  const std::vector<uint64_t> lens{10, 3, 5, 6, 2, 8, 0};
  const PackPlan plan = plan_bestfit(lens, 8, 0);
  // d3 (6) opens A, d2 (5) opens B, d1 (3) fills B exactly, d0's remainder (2) fills A, d4 opens C.
  CHECK(sorted(packs_of(plan)) == sorted({{{0, 0, 8, false}},
                                          {{5, 0, 8, true}},
                                          {{3, 0, 6, true}, {0, 8, 2, true}},
                                          {{2, 0, 5, true}, {1, 0, 3, true}},
                                          {{4, 0, 2, true}}}));
  CHECK(plan.num_tokens == 34);
  CHECK(plan.padding_tokens() == 6);
  CHECK(plan.truncated_docs == 1);
  CHECK(plan.nonempty_docs == 6);
  check_conservation(lens, plan);
}

TEST_CASE("bestfit is deterministic for a seed and the seed only reorders packs") {
  const auto lens = random_lengths(7, 3000, 512);
  const PackPlan a = plan_bestfit(lens, 512, 42), b = plan_bestfit(lens, 512, 42), c = plan_bestfit(lens, 512, 43);
  CHECK(packs_of(a) == packs_of(b));
  CHECK(packs_of(a) != packs_of(c));
  CHECK(sorted(packs_of(a)) == sorted(packs_of(c)));
}

TEST_CASE("concat and bestfit conserve every token on random length distributions") {
  for (uint32_t L : {1u, 7u, 128u, 2048u}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      const auto lens = random_lengths(seed * 100 + L, 2000, L);
      const PackPlan concat = plan_concat(lens, L);
      check_conservation(lens, concat);
      // concat: the packs read in order are the documents in order; only the last is padded.
      const PlannedSegment* prev = nullptr;
      for (const PlannedSegment& g : concat.segments) {
        if (prev && g.doc == prev->doc) REQUIRE(g.doc_pos == prev->doc_pos + prev->length);
        else REQUIRE((g.doc_pos == 0 && (!prev || (g.doc > prev->doc && prev->ends_doc))));
        prev = &g;
      }
      CHECK(concat.padding_tokens() < L);
      CHECK(concat.num_packs() == (concat.num_tokens + L - 1) / L);

      const PackPlan best = plan_bestfit(lens, L, seed);
      check_conservation(lens, best);
      std::map<uint64_t, int> segs_per_doc;
      for (const PlannedSegment& g : best.segments) {
        ++segs_per_doc[g.doc];
        // Chunks are L long except a document's last; nothing shorter than L is ever split.
        REQUIRE((g.ends_doc || g.length == L));
      }
      for (const auto& [doc, n] : segs_per_doc) REQUIRE(static_cast<uint64_t>(n) == (lens[doc] + L - 1) / L);
      // Any-fit: at most one pack is at most half full; and never more packs than BFD's bound.
      const auto packs = packs_of(best);
      CHECK(std::count_if(packs.begin(), packs.end(), [&](const Pack& p) { return 2 * fill(p) <= L; }) <= 1);
      CHECK(best.num_packs() >= concat.num_packs());
      CHECK(9 * best.num_packs() <= 11 * concat.num_packs() + 9);
    }
  }
}

TEST_CASE("bestfit equals an independent best-fit-decreasing written in Python") {
  const uint32_t L = 300;
  const auto lens = random_lengths(99, 1500, L);
  test::TempDir dir("plan");
  std::ostringstream ls;
  for (uint64_t x : lens) ls << x << "\n";
  test::write_all(dir / "lens.txt", ls.str());
  // Reference: chunks of L, remainders sorted (-length, doc), each into the bin with the least
  // room that fits (lowest bin index on ties), bins listed as sorted (doc, pos, len) tuples.
  test::write_all(dir / "bfd.py",
                  "import sys\n"
                  "L = int(sys.argv[2]); lens = [int(x) for x in open(sys.argv[1])]\n"
                  "bins, items = [], []\n"
                  "for d, n in enumerate(lens):\n"
                  "    pos = 0\n"
                  "    while n - pos >= L: bins.append([(d, pos, L)]); pos += L\n"
                  "    if pos < n: items.append((d, pos, n - pos))\n"
                  "items.sort(key=lambda t: (-t[2], t[0]))\n"
                  "room = [0] * len(bins)\n"
                  "for it in items:\n"
                  "    best = None\n"
                  "    for i, r in enumerate(room):\n"
                  "        if r >= it[2] and (best is None or r < room[best]): best = i\n"
                  "    if best is None: bins.append([]); room.append(L); best = len(bins) - 1\n"
                  "    bins[best].append(it); room[best] -= it[2]\n"
                  "for b in sorted(bins): print(' '.join('%d,%d,%d' % t for t in b))\n");
  test::RunResult ref = test::run(test::python() + " " + test::quote(dir / "bfd.py") + " " + test::quote(dir / "lens.txt") +
                                  " " + std::to_string(L));
  REQUIRE(ref.exit_code == 0);
  std::vector<Pack> mine = packs_of(plan_bestfit(lens, L, 5));
  std::vector<std::vector<std::tuple<uint64_t, uint32_t, uint32_t>>> canon;
  for (const Pack& p : mine) {
    canon.emplace_back();
    for (const auto& [doc, pos, len, ends] : p) canon.back().emplace_back(doc, pos, len);
  }
  std::sort(canon.begin(), canon.end());
  std::ostringstream os;
  for (const auto& b : canon) {
    for (size_t i = 0; i < b.size(); ++i)
      os << (i ? " " : "") << std::get<0>(b[i]) << "," << std::get<1>(b[i]) << "," << std::get<2>(b[i]);
    os << "\n";
  }
  CHECK(os.str() == ref.output);
}

TEST_CASE("the planners refuse documents a packed segment cannot address") {
  CHECK_THROWS_WITH(plan_concat({3, uint64_t{1} << 32}, 8),
                    Catch::StartsWith("document 1 has 4294967296 tokens; packed shards address at most 2^32-1"));
  CHECK_THROWS_WITH(plan_bestfit({uint64_t{1} << 32}, 8, 0), Catch::StartsWith("document 0 has 4294967296 tokens"));
}
