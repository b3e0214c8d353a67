#include "loom/packer/pack_plan.h"

#include <algorithm>
#include <set>
#include <utility>

#include "loom/error.h"

namespace loom::packer {

namespace {
// Checks document d and counts it into the plan's totals; false for an empty one (nothing to pack).
bool count_doc(PackPlan& plan, uint64_t d, uint64_t len) {
  // doc_pos is a u32 in the packed format.
  LOOM_CHECK(len <= 0xffffffffull, "document ", d, " has ", len,
             " tokens; packed shards address at most 2^32-1 tokens of one document");
  if (len == 0) return false;
  ++plan.nonempty_docs;
  plan.num_tokens += len;
  return true;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

double PackPlan::padding_fraction() const {
  return num_packs() ? static_cast<double>(padding_tokens()) / static_cast<double>(num_packs() * seq_len) : 0.0;
}

double PackPlan::truncated_fraction() const {
  return nonempty_docs ? static_cast<double>(truncated_docs) / static_cast<double>(nonempty_docs) : 0.0;
}

PackPlan plan_concat(const std::vector<uint64_t>& lens, uint32_t L) {
  LOOM_CHECK(L > 0, "--seq-len must be positive");
  PackPlan plan;
  plan.seq_len = L;
  uint32_t fill = 0;
  for (uint64_t d = 0; d < lens.size(); ++d) {
    if (!count_doc(plan, d, lens[d])) continue;
    uint64_t pos = 0;
    while (pos < lens[d]) {
      const uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(lens[d] - pos, L - fill));
      plan.segments.push_back({d, static_cast<uint32_t>(pos), take, pos + take == lens[d]});
      pos += take;
      fill += take;
      if (fill == L) {
        plan.pack_offsets.push_back(plan.segments.size());
        fill = 0;
      }
    }
    if (plan.segments.back().doc_pos > 0) ++plan.truncated_docs;
  }
  if (fill > 0) plan.pack_offsets.push_back(plan.segments.size());
  return plan;
}

PackPlan plan_bestfit(const std::vector<uint64_t>& lens, uint32_t L, uint64_t seed) {
  LOOM_CHECK(L > 0, "--seq-len must be positive");
  PackPlan plan;
  plan.seq_len = L;
  // Chunks: full L-chunks go straight into packs of their own; the remainders are bin-packed.
  std::vector<PlannedSegment> items;
  std::vector<std::vector<PlannedSegment>> packs;  // small: filled below, flattened at the end
  for (uint64_t d = 0; d < lens.size(); ++d) {
    if (!count_doc(plan, d, lens[d])) continue;
    if (lens[d] > L) ++plan.truncated_docs;
    uint64_t pos = 0;
    for (; lens[d] - pos >= L; pos += L) packs.push_back({{d, static_cast<uint32_t>(pos), L, pos + L == lens[d]}});
    if (pos < lens[d]) items.push_back({d, static_cast<uint32_t>(pos), static_cast<uint32_t>(lens[d] - pos), true});
  }
  // Longest first; ties by document (each document has at most one remainder).
  std::sort(items.begin(), items.end(), [](const PlannedSegment& a, const PlannedSegment& b) {
    return a.length != b.length ? a.length > b.length : a.doc < b.doc;
  });
  std::set<std::pair<uint32_t, size_t>> room;  // (remaining room, pack index) of open packs
  std::vector<uint32_t> left;                  // remaining room by pack index (open packs only)
  for (const PlannedSegment& it : items) {
    auto best = room.lower_bound({it.length, 0});
    size_t p;
    if (best == room.end()) {
      p = packs.size();
      packs.emplace_back();
      left.resize(packs.size(), 0);
      left[p] = L;
    } else {
      p = best->second;
      room.erase(best);
    }
    packs[p].push_back(it);
    left[p] -= it.length;
    if (left[p] > 0) room.insert({left[p], p});
  }
  // Packs are opened in a deterministic order; the seed shuffles them (Fisher-Yates).
  std::vector<size_t> order(packs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  uint64_t state = seed;
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[splitmix64(state) % i]);
  for (size_t p : order) {
    plan.segments.insert(plan.segments.end(), packs[p].begin(), packs[p].end());
    plan.pack_offsets.push_back(plan.segments.size());
  }
  return plan;
}

PackPlan plan_packs(const std::vector<uint64_t>& lens, uint32_t L, PackStrategy strategy, uint64_t seed) {
  return strategy == PackStrategy::kConcat ? plan_concat(lens, L) : plan_bestfit(lens, L, seed);
}

}  // namespace loom::packer
