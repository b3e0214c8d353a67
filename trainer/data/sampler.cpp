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
constexpr uint64_t kTagBlend = 3;
constexpr uint64_t kMaxCycle = uint64_t{1} << 16;

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

const char* mixture_name(Mixture m) { return m == Mixture::kScaled ? "scaled" : "proportional"; }

Mixture parse_mixture(const std::string& name) {
  if (name == "scaled") return Mixture::kScaled;
  if (name == "proportional") return Mixture::kProportional;
  LOOM_FAIL("data.mixture '", name, "': expected scaled (a weight multiplies the dataset's own size per epoch) or "
            "proportional (a weight is the dataset's share of every batch)");
}

// ---- BlendCycle ----

BlendCycle::BlendCycle(const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) {
    LOOM_CHECK(std::isfinite(w) && w >= 0, "dataset weight ", w, " must be a finite number >= 0");
    total += w;
  }
  LOOM_CHECK(total > 0, "the sampler has no samples: every dataset has weight 0");
  const size_t n = weights.size();
  // The smallest L that makes every share a whole number of samples, else 2^16 by largest remainder.
  uint64_t cycle = 0;
  for (uint64_t l = 1; l <= kMaxCycle && cycle == 0; ++l) {
    bool whole = true;
    for (size_t d = 0; d < n && whole; ++d) {
      const double x = weights[d] / total * static_cast<double>(l);
      whole = std::fabs(x - std::round(x)) <= 1e-9 * std::max(1.0, x);
    }
    if (whole) cycle = l;
  }
  quota.assign(n, 0);
  if (cycle != 0) {
    for (size_t d = 0; d < n; ++d)
      quota[d] = static_cast<uint64_t>(std::llround(weights[d] / total * static_cast<double>(cycle)));
  } else {
    cycle = kMaxCycle;
    std::vector<double> rest(n);
    uint64_t given = 0;
    for (size_t d = 0; d < n; ++d) {
      const double x = weights[d] / total * static_cast<double>(cycle);
      quota[d] = static_cast<uint64_t>(std::floor(x));
      rest[d] = x - std::floor(x);
      given += quota[d];
    }
    std::vector<size_t> order(n);
    for (size_t d = 0; d < n; ++d) order[d] = d;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rest[a] > rest[b]; });
    for (size_t i = 0; given < cycle; ++i, ++given) ++quota[order[i]];
  }
  uint64_t sum = 0;
  for (size_t d = 0; d < n; ++d) {
    LOOM_CHECK(weights[d] == 0 || quota[d] > 0, "dataset weight ", weights[d], " of ", total,
               " is a share below 1/", kMaxCycle, ", the proportional mixture's resolution");
    sum += quota[d];
  }
  LOOM_ASSERT(sum == cycle, "quotas sum to ", sum, " of a cycle of ", cycle);
  // Largest deficit q_d * (j + 1) - L * c_d first, ties to the lower d: exact in integers.
  dataset.resize(cycle);
  before.resize(cycle);
  std::vector<uint64_t> count(n, 0);
  for (uint64_t j = 0; j < cycle; ++j) {
    size_t best = n;
    int64_t best_deficit = 0;
    for (size_t d = 0; d < n; ++d) {
      const int64_t deficit = static_cast<int64_t>(quota[d] * (j + 1)) - static_cast<int64_t>(cycle * count[d]);
      if (quota[d] > 0 && (best == n || deficit > best_deficit)) {
        best = d;
        best_deficit = deficit;
      }
    }
    dataset[j] = static_cast<uint32_t>(best);
    before[j] = static_cast<uint32_t>(count[best]++);
  }
  for (size_t d = 0; d < n; ++d) LOOM_ASSERT(count[d] == quota[d], "dataset ", d, " got ", count[d], " of ", quota[d]);
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

Sampler::Sampler(std::vector<uint64_t> packs, std::vector<double> weights, uint64_t seed, Mixture mixture)
    : mixture_(mixture), packs_(std::move(packs)), seed_(seed) {
  LOOM_ASSERT(weights.size() == packs_.size(), weights.size(), " weights for ", packs_.size(), " datasets");
  if (mixture_ == Mixture::kProportional) {
    blend_.emplace(weights);
    for (size_t d = 0; d < packs_.size(); ++d)
      LOOM_CHECK(packs_[d] > 0 || blend_->quota[d] == 0, "dataset ", d, " has weight ", weights[d], " but no packs");
    epoch_size_ = blend_->length();
    return;
  }
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
  return blend_ ? proportional_at(epoch, i) : scaled_at(epoch, i);
}

std::vector<uint64_t> Sampler::count_datasets(uint64_t begin, uint64_t end) const {
  std::vector<uint64_t> out(packs_.size(), 0);
  for (uint64_t s = begin; s < end; ++s) {
    if (blend_) ++out[blend_->dataset[s % epoch_size_]];  // no permutation needed for the dataset alone
    else ++out[at(s).dataset];
  }
  return out;
}

SampleRef Sampler::proportional_at(uint64_t cycle, uint64_t j) const {
  const uint32_t d = blend_->dataset[j];
  const uint64_t k = cycle * blend_->quota[d] + blend_->before[j];  // d's own sample count before this one
  return {d, Permutation(packs_[d], derive_key(seed_, kTagBlend, k / packs_[d], d)).at(k % packs_[d])};
}

SampleRef Sampler::scaled_at(uint64_t epoch, uint64_t i) const {
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
