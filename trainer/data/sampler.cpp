#include "sampler.h"

#include <algorithm>
#include <cmath>

#include "loom/error.h"

namespace loom {

namespace {
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr int kFeistelRounds = 6;
// Domain tags, so the epoch order and each dataset's subset draw independent keys from one seed.
constexpr uint64_t kTagOrder = 1;
constexpr uint64_t kTagSubset = 2;

uint64_t derive_key(uint64_t seed, uint64_t tag, uint64_t epoch, uint64_t dataset) {
  return mix64(mix64(mix64(mix64(seed) ^ tag) ^ epoch) ^ dataset);
}
}  // namespace

uint64_t mix64(uint64_t x) {
  uint64_t z = x + kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t weighted_count(uint64_t packs, double weight) {
  LOOM_CHECK(std::isfinite(weight) && weight >= 0, "dataset weight ", weight, " must be a finite number >= 0");
  const double whole = std::floor(weight);
  const double frac = weight - whole;
  const auto extra = static_cast<uint64_t>(std::floor(frac * static_cast<double>(packs) + 0.5));
  return static_cast<uint64_t>(whole) * packs + std::min(extra, packs);
}

// ---- Permutation ----

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
  LOOM_ASSERT(n > 0, "a permutation of an empty range");
  // The smallest even bit width (>= 2) whose range covers n: the domain is < 4n, so cycle walking
  // takes fewer than 4 encryptions on average.
  uint64_t bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t Permutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (int r = 0; r < kFeistelRounds; ++r) {
    const uint64_t f = mix64((key_ + static_cast<uint64_t>(r) * kGolden) ^ right) & half_mask_;
    const uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::at(uint64_t i) const {
  LOOM_DASSERT(i < n_, "index ", i, " of a permutation of ", n_);
  // A bijection on [0, 2^bits) restricted to [0, n) by following the cycle until it re-enters the
  // range: still a bijection, and i's cycle contains i itself, so the walk ends.
  uint64_t y = encrypt(i);
  while (y >= n_) y = encrypt(y);
  return y;
}

// ---- Sampler ----

Sampler::Sampler(std::vector<uint64_t> packs, std::vector<double> weights, uint64_t seed)
    : packs_(std::move(packs)), seed_(seed) {
  LOOM_ASSERT(weights.size() == packs_.size(), weights.size(), " weights for ", packs_.size(), " datasets");
  first_slot_.push_back(0);
  for (size_t d = 0; d < packs_.size(); ++d) {
    const uint64_t count = weighted_count(packs_[d], weights[d]);
    repeats_.push_back(static_cast<uint64_t>(std::floor(weights[d])));
    extra_.push_back(count - repeats_.back() * packs_[d]);
    first_slot_.push_back(first_slot_.back() + count);
  }
  epoch_size_ = first_slot_.back();
  LOOM_CHECK(epoch_size_ > 0, "the sampler has no samples: every dataset is empty or has weight 0");
}

SampleRef Sampler::at(uint64_t epoch, uint64_t i) const {
  LOOM_DASSERT(i < epoch_size_, "sample ", i, " of an epoch of ", epoch_size_);
  const uint64_t slot = Permutation(epoch_size_, derive_key(seed_, kTagOrder, epoch, 0)).at(i);
  // The dataset whose slot range [first_slot_[d], first_slot_[d+1]) holds slot.
  const auto it = std::upper_bound(first_slot_.begin(), first_slot_.end(), slot);
  const auto d = static_cast<uint32_t>(it - first_slot_.begin() - 1);
  const uint64_t j = slot - first_slot_[d];
  const uint64_t whole = repeats_[d] * packs_[d];
  if (j < whole) return {d, j % packs_[d]};
  // The fractional part: the first extra_[d] packs of a per-(epoch, dataset) permutation.
  return {d, Permutation(packs_[d], derive_key(seed_, kTagSubset, epoch, d)).at(j - whole)};
}

}  // namespace loom
