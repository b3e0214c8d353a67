#include "loom/dedup/minhash.h"

#include <algorithm>

#include "loom/error.h"
#include "loom/hash.h"

namespace loom::dedup {

namespace {
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__extension__ typedef unsigned __int128 u128;  // GCC and clang's 128-bit integer

// (a * x + b) mod P for a, b, x < P: the product fits 122 bits; 2^61 = 1 (mod P) folds it.
inline uint64_t mul_add_mod(uint64_t a, uint64_t x, uint64_t b) {
  const u128 p = static_cast<u128>(a) * x + b;
  uint64_t r = static_cast<uint64_t>(p & kMersenne61) + static_cast<uint64_t>(p >> 61);
  r = (r & kMersenne61) + (r >> 61);
  return r >= kMersenne61 ? r - kMersenne61 : r;
}
}  // namespace

ExactKey exact_key(const uint32_t* ids, size_t n) {
  const size_t bytes = n * sizeof(uint32_t);
  return ExactKey{xxh64(ids, bytes, 0), xxh64(ids, bytes, 1), n};
}

void shingles(const uint32_t* ids, size_t n, uint32_t ngram, std::vector<uint64_t>& out) {
  out.clear();
  if (n == 0) return;
  if (n < ngram) {
    out.push_back(xxh64(ids, n * sizeof(uint32_t)));
    return;
  }
  out.reserve(n - ngram + 1);
  for (size_t j = 0; j + ngram <= n; ++j) out.push_back(xxh64(ids + j, ngram * sizeof(uint32_t)));
}

MinHasher::MinHasher(const MinHashParams& params) : params_(params) {
  LOOM_ASSERT(params.ngram > 0 && params.num_hashes() > 0, "ngram ", params.ngram, ", hashes ", params.num_hashes());
  uint64_t state = params.seed;
  for (uint32_t i = 0; i < params.num_hashes(); ++i) {
    a_.push_back(1 + splitmix64(state) % (kMersenne61 - 1));
    b_.push_back(splitmix64(state) % kMersenne61);
  }
}

void MinHasher::signature(const uint32_t* ids, size_t n, uint64_t* sig, std::vector<uint64_t>& scratch) const {
  shingles(ids, n, params_.ngram, scratch);
  const uint32_t h = params_.num_hashes();
  std::fill(sig, sig + h, kMersenne61);
  for (uint64_t& x : scratch) x %= kMersenne61;
  for (uint32_t i = 0; i < h; ++i) {
    uint64_t m = kMersenne61;
    const uint64_t a = a_[i], b = b_[i];
    for (const uint64_t x : scratch) m = std::min(m, mul_add_mod(a, x, b));
    sig[i] = m;
  }
}

uint64_t MinHasher::band_key(const uint64_t* sig, uint32_t band) const {
  return xxh64(sig + size_t{band} * params_.rows, size_t{params_.rows} * sizeof(uint64_t));
}

double estimated_jaccard(const uint64_t* sig_a, const uint64_t* sig_b, uint32_t num_hashes) {
  uint32_t same = 0;
  for (uint32_t i = 0; i < num_hashes; ++i) same += sig_a[i] == sig_b[i];
  return num_hashes ? static_cast<double>(same) / num_hashes : 0.0;
}

double exact_jaccard(std::vector<uint64_t>& a, std::vector<uint64_t>& b) {
  for (auto* v : {&a, &b}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  size_t common = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] == b[j]) ++common, ++i, ++j;
    else if (a[i] < b[j]) ++i;
    else ++j;
  }
  const size_t uni = a.size() + b.size() - common;
  return uni ? static_cast<double>(common) / uni : 1.0;
}

}  // namespace loom::dedup
