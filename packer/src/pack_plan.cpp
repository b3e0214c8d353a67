#include "loom/packer/pack_plan.h"

#include <algorithm>
#include <functional>
#include <memory>
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

// n elements that are all written before they are read: std::vector(n) would zero-fill tens of
// megabytes first.
template <typename T>
std::unique_ptr<T[]> uninitialized(size_t n) {
  return std::unique_ptr<T[]>(new T[n]);
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
  uint64_t tokens = 0;
  for (const uint64_t len : lens) tokens += len;
  const uint64_t packs = (tokens + L - 1) / L;  // reserved: no regrowth on millions of short documents
  plan.segments.reserve(lens.size() + packs);
  plan.pack_offsets.reserve(packs + 1);
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

namespace {
// Open packs by remaining room: a min-heap of pack indices per room value and a two-level bitmap
// of the non-empty ones. Same answers as a std::set of (room, pack) and lower_bound, without a
// node allocation per placement: short documents make that set the planner's main cost.
class RoomIndex {
 public:
  explicit RoomIndex(uint32_t L) : heaps_(L), words_(L / 64 + 1, 0), summary_(words_.size() / 64 + 1, 0) {}
  bool empty(uint32_t r) const { return heaps_[r].empty(); }
  void push(uint32_t r, uint64_t pack) {
    std::vector<uint64_t>& h = heaps_[r];
    h.push_back(pack);
    std::push_heap(h.begin(), h.end(), std::greater<>());
    set_bit(r);
  }
  // Removes and returns the first pack opened among those with the least room >= need; false if none.
  bool pop_fitting(uint32_t need, uint64_t& pack) {
    const uint32_t r = find_from(need);
    if (r == kNone) return false;
    std::vector<uint64_t>& h = heaps_[r];
    std::pop_heap(h.begin(), h.end(), std::greater<>());
    pack = h.back();
    h.pop_back();
    if (h.empty()) clear_bit(r);
    return true;
  }

 private:
  static constexpr uint32_t kNone = 0xffffffffu;
  void set_bit(uint32_t r) {
    words_[r / 64] |= uint64_t{1} << (r % 64);
    summary_[r / 4096] |= uint64_t{1} << (r / 64 % 64);
  }
  void clear_bit(uint32_t r) {
    words_[r / 64] &= ~(uint64_t{1} << (r % 64));
    if (!words_[r / 64]) summary_[r / 4096] &= ~(uint64_t{1} << (r / 64 % 64));
  }
  uint32_t find_from(uint32_t r) const {
    if (r >= heaps_.size()) return kNone;
    size_t w = r / 64;
    const uint64_t here = words_[w] & (~uint64_t{0} << (r % 64));
    if (here) return static_cast<uint32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(here)));
    ++w;  // the next non-empty word, through the summary
    for (size_t s = w / 64; s < summary_.size(); ++s) {
      const uint64_t bits = s == w / 64 ? summary_[s] & (~uint64_t{0} << (w % 64)) : summary_[s];
      if (bits) {
        const size_t word = s * 64 + static_cast<size_t>(__builtin_ctzll(bits));
        return static_cast<uint32_t>(word * 64 + static_cast<size_t>(__builtin_ctzll(words_[word])));
      }
    }
    return kNone;
  }
  std::vector<std::vector<uint64_t>> heaps_;  // by room, 0..L-1 (a pack with room L is never open)
  std::vector<uint64_t> words_, summary_;
};
}  // namespace

PackPlan plan_bestfit(const std::vector<uint64_t>& lens, uint32_t L, uint64_t seed) {
  LOOM_CHECK(L > 0, "--seq-len must be positive");
  PackPlan plan;
  plan.seq_len = L;
  // Chunks: full L-chunks go straight into packs of their own (packs 0..F-1, in document order);
  // the remainders (1..L-1 tokens, "items") are bin-packed into the packs after them. A first pass
  // counts both, so that the second writes each chunk once, in its final place: the items longest
  // first, ties by document (a counting sort by length), with no vector regrown on 10^6 documents.
  std::vector<uint64_t> by_len(L, 0);
  uint64_t num_full = 0;
  for (uint64_t d = 0; d < lens.size(); ++d) {
    if (!count_doc(plan, d, lens[d])) continue;
    if (lens[d] > L) ++plan.truncated_docs;
    num_full += lens[d] / L;
    ++by_len[lens[d] % L];
  }
  by_len[0] = 0;  // documents that end with a full chunk have no remainder
  std::vector<uint64_t> at(L, 0);
  uint64_t num_items = 0;
  for (uint32_t len = L - 1; len > 0; --len) {
    at[len] = num_items;
    num_items += by_len[len];
  }
  std::vector<PlannedSegment> full;
  std::vector<uint64_t> full_src;  // each chunk's first token, globally (PackPlan::segment_src)
  const std::unique_ptr<PlannedSegment[]> items = uninitialized<PlannedSegment>(num_items);
  const std::unique_ptr<uint64_t[]> item_src = uninitialized<uint64_t>(num_items);
  full.reserve(num_full);
  full_src.reserve(num_full);
  uint64_t start = 0;  // document d's first token, globally
  for (uint64_t d = 0; d < lens.size(); start += lens[d++]) {
    const uint64_t len = lens[d], rem = len % L;
    for (uint64_t pos = 0; pos + L <= len; pos += L) {
      full.push_back({d, static_cast<uint32_t>(pos), L, pos + L == len});
      full_src.push_back(start + pos);
    }
    if (rem > 0) {
      item_src[at[rem]] = start + len - rem;
      items[at[rem]++] = {d, static_cast<uint32_t>(len - rem), static_cast<uint32_t>(rem), true};
    }
  }
  // Best fit: each item's pack, and each pack's item count. Items are sorted, so their lengths are
  // runs of by_len[len] items each.
  const uint64_t first = full.size();
  std::unique_ptr<uint64_t[]> item_pack = uninitialized<uint64_t>(num_items);
  std::vector<uint32_t> left, count;  // by pack - first
  RoomIndex room(L);
  size_t i = 0;
  for (uint32_t len = L - 1; len > 0; --len) {
    for (const size_t run_end = i + by_len[len]; i < run_end; ++i) {
      uint64_t p;
      if (!room.pop_fitting(len, p)) {
        p = first + left.size();
        left.push_back(L);
        count.push_back(0);
      }
      item_pack[i] = p;
      ++count[p - first];
      left[p - first] -= len;
      if (left[p - first] > 0) room.push(left[p - first], p);
    }
  }
  // Each bin pack's items in placement order (ascending item), by pack: their indices.
  std::vector<uint64_t> begin(count.size() + 1, 0);
  for (size_t q = 0; q < count.size(); ++q) begin[q + 1] = begin[q] + count[q];
  const std::unique_ptr<uint64_t[]> placed = uninitialized<uint64_t>(num_items);
  {
    std::vector<uint64_t> next(begin.begin(), begin.end() - 1);
    for (size_t k = 0; k < num_items; ++k) placed[next[item_pack[k] - first]++] = k;
  }
  item_pack.reset();
  // Packs are opened in a deterministic order; the seed shuffles them (Fisher-Yates).
  const size_t num_packs = full.size() + count.size();
  std::vector<size_t> order(num_packs);
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  uint64_t state = seed;
  for (size_t k = order.size(); k > 1; --k) std::swap(order[k - 1], order[splitmix64(state) % k]);
  plan.segments.reserve(full.size() + num_items);
  plan.segment_src.reserve(full.size() + num_items);
  plan.pack_offsets.reserve(num_packs + 1);
  for (const size_t p : order) {
    if (p < first) {
      plan.segments.push_back(full[p]);
      plan.segment_src.push_back(full_src[p]);
    } else {
      for (uint64_t j = begin[p - first]; j < begin[p - first + 1]; ++j) {
        plan.segments.push_back(items[placed[j]]);
        plan.segment_src.push_back(item_src[placed[j]]);
      }
    }
    plan.pack_offsets.push_back(plan.segments.size());
  }
  return plan;
}

PackPlan plan_packs(const std::vector<uint64_t>& lens, uint32_t L, PackStrategy strategy, uint64_t seed) {
  return strategy == PackStrategy::kConcat ? plan_concat(lens, L) : plan_bestfit(lens, L, seed);
}

}  // namespace loom::packer
