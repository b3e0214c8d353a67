// MinHash over token n-grams, the one definition every stage of loom-dedup and the tests' Python
// reference (tests/dedup/minhash_ref.py) follow. Same text in docs/DEDUP.md.
//
//   shingles   a document of L token ids t[0..L) has the shingles x_j = XXH64(bytes of t[j..j+n)),
//              j = 0..L-n, each id as 4 little-endian bytes, seed 0. A document of 0 < L < n tokens has
//              one shingle, the XXH64 of all its ids (so short documents still match their copies).
//              An empty document has none. Ids are taken as stored, bos/eos included.
//   hashes     h_i(x) = (a_i * (x mod P) + b_i) mod P, P = 2^61 - 1, i = 0..H-1, exact in 128 bits.
//              a_i, b_i come from splitmix64 seeded with `seed`: for each i in order, a_i = 1 +
//              next() mod (P - 1), then b_i = next() mod P.
//   signature  sig[i] = min over shingles of h_i(x); P (no shingle reaches it) for an empty document.
//   bands      H = bands * rows; band b's key is XXH64 (seed 0) of sig[b*rows .. b*rows+rows) as
//              little-endian u64. Two documents with an equal key in any band are candidates.
//   exact key  XXH64 (seed 0) and XXH64 (seed 1) of the document's ids (4 bytes each) and its length:
//              equal keys are taken as identical token sequences (a false match needs a 128-bit
//              collision between two documents of the same length).
//   estimate   the estimated Jaccard of two documents is the fraction of i with equal sig[i].
//   Jaccard    the exact one is |A n B| / |A u B| of their shingle sets (shingles compared by hash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::dedup {

inline constexpr uint64_t kMersenne61 = (uint64_t{1} << 61) - 1;

struct MinHashParams {
  uint32_t ngram = 5;
  uint32_t bands = 14;
  uint32_t rows = 8;
  uint64_t seed = 1;
  uint32_t num_hashes() const { return bands * rows; }
};

// The full-document identity of the exact-duplicate stage.
struct ExactKey {
  uint64_t h0 = 0, h1 = 0, length = 0;
  bool operator==(const ExactKey& o) const { return h0 == o.h0 && h1 == o.h1 && length == o.length; }
};
ExactKey exact_key(const uint32_t* ids, size_t n);

// The shingle hashes of a document, in position order (duplicates kept), as defined above.
void shingles(const uint32_t* ids, size_t n, uint32_t ngram, std::vector<uint64_t>& out);

namespace detail {
// The kernel of MinHasher::signature: sig[i] = min over j < n of (a[i] (x[j] mod P) + b[i]) mod P for
// i < h, with a[i], b[i] < P and any 64-bit x[j]; P where n = 0. Exact in 64-bit arithmetic.
using MinKernelFn = void (*)(const uint64_t* a, const uint64_t* b, uint32_t h, const uint64_t* x, size_t n,
                             uint64_t* sig);
struct MinKernel {
  const char* name;
  MinKernelFn run;
  bool supported;  // this CPU has the instructions it was compiled for
};
// Every compiled variant, fastest first: on x86-64 with GCC the x86-64-v4 (AVX-512) and AVX2 builds
// of the one source, then the baseline, which runs everywhere. Exposed so tests run each one.
const std::vector<MinKernel>& min_kernels();
// The first supported one: what MinHasher uses.
const MinKernel& best_min_kernel();
}  // namespace detail

class MinHasher {
 public:
  explicit MinHasher(const MinHashParams& params);
  const MinHashParams& params() const { return params_; }
  // sig must hold num_hashes() values. scratch: the shingles, reused across calls by one thread.
  void signature(const uint32_t* ids, size_t n, uint64_t* sig, std::vector<uint64_t>& scratch) const;
  uint64_t band_key(const uint64_t* sig, uint32_t band) const;
  uint64_t a(uint32_t i) const { return a_[i]; }
  uint64_t b(uint32_t i) const { return b_[i]; }

 private:
  MinHashParams params_;
  std::vector<uint64_t> a_, b_;
  detail::MinKernelFn kernel_;
};

double estimated_jaccard(const uint64_t* sig_a, const uint64_t* sig_b, uint32_t num_hashes);
// Jaccard of two shingle lists as sets (each is sorted and deduplicated in place).
double exact_jaccard(std::vector<uint64_t>& a, std::vector<uint64_t>& b);

}  // namespace loom::dedup
