// The deterministic distributed sampler: (seed, stream index) -> one global order of packs that does
// not depend on the number of ranks; each rank takes its slice of each global batch. What a dataset's
// weight w_d means is the mixture (data.mixture), one of two:
//
// SCALED mixture (the default): w_d multiplies dataset d's own size per epoch.
//
// Epoch. Dataset d has n_d packs and a weight w_d = k + f (k = floor(w_d)). One epoch holds every
// pack of d k times, plus round(f * n_d) of its packs (round half up) chosen afresh for each epoch
// by (seed, epoch, d). So weight 1 = each pack once per epoch, 2 = each pack twice, 0.5 = a seeded
// half, 0 = the dataset is not used. N = sum over d of k*n_d + round(f*n_d) samples per epoch.
//
// Order. Epoch e's order is a pseudo-random permutation of its N samples keyed by (seed, e): a
// 6-round balanced Feistel network over splitmix64, cycle-walked down to [0, N). Sample i of the
// order is computed in O(1), so the order is never materialised (memory O(datasets), not
// O(packs)), a resume jumps straight to its position, and the result is the same on every
// compiler and standard library (no std::shuffle or std::*_distribution).
//
// Stream. Training reads epochs back to back: stream index s is sample s % N of epoch s / N.
// Nothing is dropped: a global batch that straddles an epoch boundary takes the end of epoch e and
// the start of epoch e+1 (so it may hold the same pack twice). This keeps the stream independent of
// the global batch size, hence of the number of ranks W.
//
// PROPORTIONAL mixture (Megatron-LM's blend): dataset d fills the share p_d = w_d / sum(w) of the
// stream, whatever its size.
//
// Cycle. The stream is cut into cycles of L samples, of which dataset d gets q_d. L is the smallest
// integer in [1, 2^16] for which every p_d * L is an integer (to 1e-9; weights 3:1 give L = 4,
// 0.3:0.7 give L = 10), else 2^16 with q_d = floor(p_d * 2^16) plus one for the datasets with the
// largest remainders (ties to the lower d); a weight > 0 whose q_d would be 0 is refused.
//
// Order within a cycle. Position j in [0, L) goes to the dataset with the largest deficit
// q_d * (j + 1) - L * c_d, where c_d counts the positions before j given to d (ties to the lower d):
// a largest-deficit rule like Megatron's blend (the same shares, not the same order), in exact
// integers. A dataset is chosen only while its deficit is the largest, hence > 0, so no dataset
// ever runs a whole sample ahead of its share; with
// two datasets neither runs a whole sample behind, and G consecutive samples hold G * p_d of each
// within 2. Any L consecutive samples hold exactly q_d of dataset d, so a global batch of G = k * L
// holds exactly k * q_d, whatever rank count slices it.
//
// Packs. The k-th sample of dataset d in the stream (k = cycle * q_d + c_d) is pack
// Permutation(n_d, key(seed, k / n_d, d)).at(k % n_d), the key drawn from its own domain of the
// seed: each dataset is read in epochs of its own, every pack once per epoch in a fresh order,
// independent of the other datasets. A dataset smaller than its share repeats sooner than a larger
// one; nothing is dropped. Here an "epoch" of the stream (epoch_size(), SamplerState::epoch) is
// one cycle of L samples.
//
// Global batch layout. With B = micro_bsz, M = micro_num and G = B*M*W, the step that starts at
// consumed sample c covers stream[c, c+G); rank r's micro-step m takes the B samples
//   stream[c + r*M*B + m*B, c + r*M*B + (m+1)*B)
// i.e. each rank reads M*B consecutive samples. Only this slicing depends on W, so a resume with a
// different W continues at exactly sample c (InternLM asserts W unchanged; loom does not).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {

// Where the data stands. consumed_samples (global, over all ranks and epochs) is the position;
// epoch = consumed_samples / N is recorded for checking and logs.
struct SamplerState {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t consumed_samples = 0;
};

// One sample: pack `pack` (counted over the dataset's shards in sorted order) of dataset `dataset`.
struct SampleRef {
  uint32_t dataset = 0;
  uint64_t pack = 0;
  bool operator==(const SampleRef& o) const { return dataset == o.dataset && pack == o.pack; }
};

// The B/M/W slicing described above.
struct BatchLayout {
  int64_t micro_bsz = 1;
  int64_t micro_num = 1;
  int64_t world = 1;
  uint64_t global_batch() const { return static_cast<uint64_t>(micro_bsz * micro_num * world); }
  // Stream index of row `row` of rank `rank`'s micro-step `micro` in the step starting at `consumed`.
  uint64_t stream_index(uint64_t consumed, int64_t rank, int64_t micro, int64_t row) const {
    return consumed + static_cast<uint64_t>((rank * micro_num + micro) * micro_bsz + row);
  }
};

// What a dataset weight means (above); data.mixture's two values.
enum class Mixture { kScaled, kProportional };
const char* mixture_name(Mixture m);  // "scaled", "proportional"
Mixture parse_mixture(const std::string& name);  // throws loom::Error naming data.mixture

// Samples per epoch of a dataset of `packs` packs with weight `weight` (the scaled mixture, above).
uint64_t weighted_count(uint64_t packs, double weight);

// The proportional mixture's cycle (above): L, each dataset's q_d, and per position its dataset and
// the count c_d of earlier positions of that dataset.
struct BlendCycle {
  std::vector<uint64_t> quota;     // q_d
  std::vector<uint32_t> dataset;   // size L
  std::vector<uint32_t> before;    // size L: c_d at that position
  uint64_t length() const { return dataset.size(); }
  explicit BlendCycle(const std::vector<double>& weights);
};

// A keyed pseudo-random permutation of [0, n): at(i) for i in [0, n) visits every value once.
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key);
  uint64_t at(uint64_t i) const;
  uint64_t size() const { return n_; }

 private:
  uint64_t encrypt(uint64_t x) const;
  uint64_t n_, key_, half_bits_, half_mask_;
};

// splitmix64's finaliser: the one mixing function of the sampler.
uint64_t mix64(uint64_t x);

class Sampler {
 public:
  // packs[d] and weights[d] for each dataset d (ids in sorted folder order).
  Sampler(std::vector<uint64_t> packs, std::vector<double> weights, uint64_t seed, Mixture mixture = Mixture::kScaled);

  uint64_t seed() const { return seed_; }
  Mixture mixture() const { return mixture_; }
  uint64_t epoch_size() const { return epoch_size_; }  // N (scaled) or L (proportional)
  size_t num_datasets() const { return packs_.size(); }
  // Sample i of epoch e's order (i < epoch_size()).
  SampleRef at(uint64_t epoch, uint64_t i) const;
  // Stream index s: sample s % N of epoch s / N.
  SampleRef at(uint64_t stream_index) const { return at(stream_index / epoch_size_, stream_index % epoch_size_); }
  SamplerState state_at(uint64_t consumed_samples) const {
    return {seed_, consumed_samples / epoch_size_, consumed_samples};
  }
  // Samples of each dataset among stream indices [begin, end).
  std::vector<uint64_t> count_datasets(uint64_t begin, uint64_t end) const;

 private:
  SampleRef scaled_at(uint64_t epoch, uint64_t i) const;
  SampleRef proportional_at(uint64_t cycle, uint64_t j) const;

  Mixture mixture_;
  std::vector<uint64_t> packs_;
  std::vector<uint64_t> repeats_;    // k per dataset
  std::vector<uint64_t> extra_;      // round(f * n) per dataset
  std::vector<uint64_t> first_slot_;  // prefix sums of k*n + extra, size datasets + 1
  uint64_t seed_;
  uint64_t epoch_size_ = 0;
  std::optional<BlendCycle> blend_;  // the proportional mixture's cycle
};

}  // namespace loom
