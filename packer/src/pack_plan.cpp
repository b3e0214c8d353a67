#include "loom/packer/pack_plan.h"

#include <algorithm>
#include <functional>
#include <future>
#include <memory>
#include <utility>

#include "loom/error.h"

namespace loom::packer {

namespace {
// Checks document d and counts it into the plan's totals; false for an empty one (nothing to pack).
bool count_doc(PackPlan& plan, uint64_t d, uint64_t len) {
  check_doc_length(d, len);
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
  return fraction(padding_tokens(), num_packs() * seq_len);
}

double PackPlan::truncated_fraction() const {
  return fraction(truncated_docs, nonempty_docs);
}

ConcatCut::ConcatCut(const std::vector<uint64_t>& lens, uint32_t L) : lens_(lens.data()), num_docs_(lens.size()), L_(L) {
  LOOM_CHECK(L > 0, "--seq-len must be positive");
}

PackPlan plan_concat(const std::vector<uint64_t>& lens, uint32_t L) {
  ConcatCut cut(lens, L);
  PackPlan plan;
  plan.seq_len = L;
  uint64_t tokens = 0;
  for (const uint64_t len : lens) tokens += len;
  const uint64_t packs = (tokens + L - 1) / L;  // reserved: no regrowth on millions of short documents
  plan.segments.reserve(lens.size() + packs);
  plan.pack_offsets.reserve(packs + 1);
  auto add = [&plan](uint64_t d, uint32_t pos, uint32_t len, bool ends) { plan.segments.push_back({d, pos, len, ends}); };
  while (cut.next_pack(add) > 0) plan.pack_offsets.push_back(plan.segments.size());
  plan.num_tokens = cut.num_tokens();
  plan.nonempty_docs = cut.nonempty_docs();
  plan.truncated_docs = cut.truncated_docs();
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

// Best fit of the items (remainders, by_len[len] of each length, taken longest first): each
// item's pack (packs first, first + 1, ... opened as needed) and its rank among that pack's items
// (placement order, which is ascending item order). Returns each opened pack's item count.
std::vector<uint32_t> best_fit(const std::vector<uint64_t>& by_len, uint32_t L, uint64_t first, uint64_t* item_pack,
                               uint32_t* item_rank) {
  std::vector<uint32_t> left, count;  // by pack - first
  RoomIndex room(L);
  uint64_t i = 0;
  for (uint32_t len = L - 1; len > 0; --len) {
    for (const uint64_t run_end = i + by_len[len]; i < run_end; ++i) {
      uint64_t p;
      if (!room.pop_fitting(len, p)) {
        p = first + left.size();
        left.push_back(L);
        count.push_back(0);
      }
      item_pack[i] = p;
      item_rank[i] = count[p - first]++;
      left[p - first] -= len;
      if (left[p - first] > 0) room.push(left[p - first], p);
    }
  }
  return count;
}

// The documents again, in order: each full chunk to its pack (the full packs in document order),
// each item to its pack and rank, at the pack's place in the plan (pack_start).
void place_chunks(const std::vector<uint64_t>& lens, const std::vector<uint64_t>& by_len,
                  const std::vector<uint64_t>& pack_start, const uint64_t* item_pack, const uint32_t* item_rank,
                  PackPlan& plan) {
  const uint32_t L = plan.seq_len;
  std::vector<uint64_t> at(L, 0);  // the next item of each length
  uint64_t next_run = 0;
  for (uint32_t len = L - 1; len > 0; --len) {
    at[len] = next_run;
    next_run += by_len[len];
  }
  uint64_t full = 0, start = 0;  // start: document d's first token, globally
  for (uint64_t d = 0; d < lens.size(); start += lens[d++]) {
    const uint64_t len = lens[d], rem = len % L;
    for (uint64_t pos = 0; pos + L <= len; pos += L) {
      const uint64_t s = pack_start[full++];
      plan.segments[s] = {d, static_cast<uint32_t>(pos), L, pos + L == len};
      plan.segment_src[s] = start + pos;
    }
    if (rem > 0) {
      const uint64_t k = at[rem]++;
      const uint64_t s = pack_start[item_pack[k]] + item_rank[k];
      plan.segments[s] = {d, static_cast<uint32_t>(len - rem), static_cast<uint32_t>(rem), true};
      plan.segment_src[s] = start + len - rem;
    }
  }
}
}  // namespace

PackPlan plan_bestfit(const std::vector<uint64_t>& lens, uint32_t L, uint64_t seed) {
  LOOM_CHECK(L > 0, "--seq-len must be positive");
  PackPlan plan;
  plan.seq_len = L;
  // Chunks: full L-chunks go straight into packs of their own (packs 0..F-1, in document order);
  // the remainders (1..L-1 tokens, "items") are bin-packed into the packs after them, longest
  // first, ties by document. Best fit needs only the items' lengths, so a first pass counts them by
  // length (a counting sort); the placement gives each item its pack and its rank there, the
  // shuffle each pack's place, and a second pass over the documents writes every chunk once, in
  // its final place: no list of items is built, and no vector is regrown on 10^6 documents.
  std::vector<uint64_t> by_len(L, 0);
  uint64_t num_full = 0;
  for (uint64_t d = 0; d < lens.size(); ++d) {
    if (!count_doc(plan, d, lens[d])) continue;
    if (lens[d] > L) ++plan.truncated_docs;
    num_full += lens[d] / L;
    ++by_len[lens[d] % L];
  }
  by_len[0] = 0;  // documents that end with a full chunk have no remainder
  uint64_t num_items = 0;
  for (uint32_t len = L - 1; len > 0; --len) num_items += by_len[len];
  // The plan's arrays are sized now, on another thread while best fit runs: their first touch
  // (tens of MB of page faults and zeroing) costs about as much as best fit itself.
  std::future<void> sized = std::async(std::launch::async, [&plan, n = num_full + num_items] {
    plan.segments.resize(n);
    plan.segment_src.resize(n);
  });
  const uint64_t first = num_full;
  const std::unique_ptr<uint64_t[]> item_pack = uninitialized<uint64_t>(num_items);
  const std::unique_ptr<uint32_t[]> item_rank = uninitialized<uint32_t>(num_items);
  const std::vector<uint32_t> count = best_fit(by_len, L, first, item_pack.get(), item_rank.get());
  // Packs are opened in a deterministic order; the seed shuffles them (Fisher-Yates). Each pack's
  // first segment lands at pack_start in the plan.
  const uint64_t num_packs = first + count.size();
  std::vector<uint64_t> order(num_packs);
  for (uint64_t k = 0; k < order.size(); ++k) order[k] = k;
  uint64_t state = seed;
  for (uint64_t k = order.size(); k > 1; --k) std::swap(order[k - 1], order[splitmix64(state) % k]);
  std::vector<uint64_t> pack_start(num_packs);
  plan.pack_offsets.reserve(num_packs + 1);
  uint64_t segments = 0;
  for (const uint64_t p : order) {
    pack_start[p] = segments;
    segments += p < first ? 1 : count[p - first];
    plan.pack_offsets.push_back(segments);
  }
  sized.get();
  LOOM_ASSERT(segments == plan.segments.size(), "best fit placed ", segments, " chunks of ", plan.segments.size());
  place_chunks(lens, by_len, pack_start, item_pack.get(), item_rank.get(), plan);
  return plan;
}

PackPlan plan_packs(const std::vector<uint64_t>& lens, uint32_t L, PackStrategy strategy, uint64_t seed) {
  return strategy == PackStrategy::kConcat ? plan_concat(lens, L) : plan_bestfit(lens, L, seed);
}

}  // namespace loom::packer
