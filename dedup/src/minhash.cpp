#include "loom/dedup/minhash.h"

#include <algorithm>

#include "loom/error.h"
#include "loom/hash.h"

// The x86-64 variants of the MinHash kernel need GCC's target attributes and __builtin_cpu_supports
// with x86-64 levels (GCC 12); other compilers and CPUs build the baseline alone.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LOOM_MIN_HASH_X86 1
#else
#define LOOM_MIN_HASH_X86 0
#endif

namespace loom::dedup {

namespace {
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kLow32 = 0xffffffffu, kLow29 = (uint64_t{1} << 29) - 1;

// x mod P for any 64-bit x: x = hi 2^61 + lo and 2^61 = 1 (mod P), so x = lo + hi (mod P), a sum
// below 2^61 + 8 < 2P that one conditional subtraction brings into [0, P).
inline uint64_t mod_p(uint64_t x) {
  x = (x & kMersenne61) + (x >> 61);
  return x >= kMersenne61 ? x - kMersenne61 : x;
}

// sig[l] = min over j of (a[l] (x[j] mod P) + b[l]) mod P for the w <= W hashes l < w; lanes past w
// compute with a = b = 0 and are not stored. Shingles outer, the W lanes inner: the lanes are
// independent and use 32 x 32 -> 64-bit multiplies only, so GCC vectorizes the inner loop for the
// target of the function it is inlined into, and the W minima stay in registers over the shingles.
//
// Exact in 64 bits. With a, x < P < 2^61: a = ah 2^32 + al, x = xh 2^32 + xl, al, xl < 2^32,
// ah, xh < 2^29, and a x = ah xh 2^64 + (ah xl + al xh) 2^32 + al xl. Modulo P (2^61 = 1):
//   hi  = ah (8 xh)        2^64 = 8 2^61 = 8; 8 xh < 2^32, so a 32 x 32 product, < 2^61;
//   mid = ah xl + al xh    each product < 2^61, the sum < 2^62; mid 2^32 = (mid >> 29) 2^61 +
//                          (mid mod 2^29) 2^32 = (mid >> 29) + (mid mod 2^29) 2^32: < 2^33 and < 2^61;
//   lo  = al xl            < 2^64 = (lo >> 61) 2^61 + (lo & P) = (lo >> 61) + (lo & P): < 8 and < 2^61.
// s = hi + both parts of mid + both parts of lo + b < 4 2^61 + 2^33 + 8 < 2^64: no wrap, and
// s = a x + b (mod P). Folding once more, r = (s & P) + (s >> 61) < 2^61 + 4 < 2P, so r or r - P is
// the one value in [0, P) congruent to a x + b: the 128-bit result. min(r, r - P) picks it without a
// branch: where r < P, r - P wraps to above 2^63.
template <uint32_t W>
inline __attribute__((always_inline)) void min_hash_lanes(const uint64_t* a, const uint64_t* b, uint32_t w,
                                                          const uint64_t* x, size_t n, uint64_t* sig) {
  uint32_t al[W], ah[W];
  uint64_t bl[W], m[W];
  for (uint32_t l = 0; l < W; ++l) {
    const uint64_t al64 = l < w ? a[l] : 0;
    al[l] = static_cast<uint32_t>(al64 & kLow32), ah[l] = static_cast<uint32_t>(al64 >> 32);
    bl[l] = l < w ? b[l] : 0, m[l] = kMersenne61;
  }
  for (size_t j = 0; j < n; ++j) {
    const uint64_t xj = mod_p(x[j]);
    const uint32_t xl = static_cast<uint32_t>(xj & kLow32), xh = static_cast<uint32_t>(xj >> 32), xh8 = xh << 3;
    for (uint32_t l = 0; l < W; ++l) {
      const uint64_t hi = uint64_t{ah[l]} * xh8;
      const uint64_t mid = uint64_t{ah[l]} * xl + uint64_t{al[l]} * xh;
      const uint64_t lo = uint64_t{al[l]} * xl;
      const uint64_t s = hi + (mid >> 29) + ((mid & kLow29) << 32) + (lo & kMersenne61) + (lo >> 61) + bl[l];
      const uint64_t r = (s & kMersenne61) + (s >> 61);
      m[l] = std::min(m[l], std::min(r, r - kMersenne61));
    }
  }
  std::copy(m, m + w, sig);
}

// 16 lanes: two AVX-512 vectors (four AVX2 ones); a last partial group computes 16 lanes.
constexpr uint32_t kLanes = 16;

inline __attribute__((always_inline)) void min_hash_groups(const uint64_t* a, const uint64_t* b, uint32_t h,
                                                           const uint64_t* x, size_t n, uint64_t* sig) {
  for (uint32_t i = 0; i < h; i += kLanes) min_hash_lanes<kLanes>(a + i, b + i, std::min(kLanes, h - i), x, n, sig + i);
}

void min_hash_baseline(const uint64_t* a, const uint64_t* b, uint32_t h, const uint64_t* x, size_t n, uint64_t* sig) {
  min_hash_groups(a, b, h, x, n, sig);
}
// The same source compiled for newer x86-64 levels and chosen at run time: GCC's target_clones without
// its resolver, so that the tests can call every variant, not only the one this CPU picks.
#if LOOM_MIN_HASH_X86
// x86-64-v4: min_hash_lanes' arithmetic in GCC vector types, 8 lanes a vector, with each 32 x 32-bit
// product an explicit vpmuludq. From the portable loop GCC 12 forms the products as vpmullq (64 x 64),
// 3 uops on Intel's port 0 against vpmuludq's 1 (uops.info; 1 and 1 on AMD Zen 4, where this form
// measured 18% faster too). The builtin, not its intrinsic: GCC 12's _mm512_* intrinsics fill an
// undefined operand that -Wmaybe-uninitialized reports under -Werror.
using V8u = unsigned long long __attribute__((vector_size(64)));
using V8i = long long __attribute__((vector_size(64)));
using V16i = int __attribute__((vector_size(64)));

__attribute__((target("arch=x86-64-v4"), always_inline)) inline V8u mul_low32(V8u p, V8u q) {
  const V8i zero{};
  return reinterpret_cast<V8u>(
      __builtin_ia32_pmuludq512_mask(reinterpret_cast<V16i>(p), reinterpret_cast<V16i>(q), zero, 0xff));
}

template <uint32_t V>
__attribute__((target("arch=x86-64-v4"), always_inline)) inline void min_hash_vectors(
    const uint64_t* a, const uint64_t* b, uint32_t w, const uint64_t* x, size_t n, uint64_t* sig) {
  V8u al[V]{}, ah[V], bl[V]{}, m[V];  // al, bl filled lane by lane: zeroed first
  for (uint32_t v = 0; v < V; ++v) {
    for (uint32_t i = 0; i < 8; ++i) {
      const uint32_t l = 8 * v + i;
      al[v][i] = l < w ? a[l] : 0, bl[v][i] = l < w ? b[l] : 0;
    }
    ah[v] = al[v] >> 32, m[v] = V8u{} + kMersenne61;  // mul_low32 reads al's low 32 bits alone
  }
  for (size_t j = 0; j < n; ++j) {
    const uint64_t xj = mod_p(x[j]);
    const V8u xl = V8u{} + xj, xh = V8u{} + (xj >> 32), xh8 = xh << 3;
    for (uint32_t v = 0; v < V; ++v) {
      const V8u hi = mul_low32(ah[v], xh8);
      const V8u mid = mul_low32(ah[v], xl) + mul_low32(al[v], xh);
      const V8u lo = mul_low32(al[v], xl);
      const V8u s = hi + (mid >> 29) + ((mid & kLow29) << 32) + (lo & kMersenne61) + (lo >> 61) + bl[v];
      const V8u r = (s & kMersenne61) + (s >> 61), q = r - kMersenne61;
      const V8u t = r < q ? r : q;
      m[v] = m[v] < t ? m[v] : t;
    }
  }
  for (uint32_t l = 0; l < w; ++l) sig[l] = m[l / 8][l % 8];
}

__attribute__((target("arch=x86-64-v4"))) void min_hash_x86_64_v4(const uint64_t* a, const uint64_t* b, uint32_t h,
                                                                  const uint64_t* x, size_t n, uint64_t* sig) {
  for (uint32_t i = 0; i < h; i += kLanes)
    min_hash_vectors<kLanes / 8>(a + i, b + i, std::min(kLanes, h - i), x, n, sig + i);
}
__attribute__((target("avx2"))) void min_hash_avx2(const uint64_t* a, const uint64_t* b, uint32_t h, const uint64_t* x,
                                                   size_t n, uint64_t* sig) {
  min_hash_groups(a, b, h, x, n, sig);
}
#endif
}  // namespace

namespace detail {
const std::vector<MinKernel>& min_kernels() {
  static const std::vector<MinKernel> kernels = [] {
    std::vector<MinKernel> k;
#if LOOM_MIN_HASH_X86
    __builtin_cpu_init();
    k.push_back({"x86-64-v4", min_hash_x86_64_v4, __builtin_cpu_supports("x86-64-v4") != 0});
    k.push_back({"avx2", min_hash_avx2, __builtin_cpu_supports("avx2") != 0});
#endif
    k.push_back({"baseline", min_hash_baseline, true});
    return k;
  }();
  return kernels;
}

const MinKernel& best_min_kernel() {
  for (const MinKernel& k : min_kernels())
    if (k.supported) return k;
  return min_kernels().back();  // the baseline, supported everywhere: not reached
}
}  // namespace detail

ExactKey exact_key(const uint32_t* ids, size_t n) {
  const size_t bytes = n * sizeof(uint32_t);
  return ExactKey{xxh64(ids, bytes, 0), xxh64(ids, bytes, 1), n};
}

namespace {
// The shingles of n >= Ngram ids, each window's XXH64 inline with its length a constant.
template <uint32_t Ngram>
void fixed_shingles(const uint32_t* ids, size_t n, uint64_t* out) {
  for (size_t j = 0; j + Ngram <= n; ++j) out[j] = xxh64_short(ids + j, Ngram * sizeof(uint32_t));
}
}  // namespace

void shingles(const uint32_t* ids, size_t n, uint32_t ngram, std::vector<uint64_t>& out) {
  if (n < ngram) {
    out.assign(n > 0 ? 1 : 0, xxh64(ids, n * sizeof(uint32_t)));
    return;
  }
  out.resize(n - ngram + 1);  // no clear() first: the scratch's old values are overwritten, not zeroed
  // Windows under 32 bytes (ngram < 8) take XXH64's short path, a constant-length copy for each
  // ngram the job may use; longer windows the generic one.
  switch (ngram) {
    case 1: return fixed_shingles<1>(ids, n, out.data());
    case 2: return fixed_shingles<2>(ids, n, out.data());
    case 3: return fixed_shingles<3>(ids, n, out.data());
    case 4: return fixed_shingles<4>(ids, n, out.data());
    case 5: return fixed_shingles<5>(ids, n, out.data());
    case 6: return fixed_shingles<6>(ids, n, out.data());
    case 7: return fixed_shingles<7>(ids, n, out.data());
    default:
      for (size_t j = 0; j + ngram <= n; ++j) out[j] = xxh64(ids + j, ngram * sizeof(uint32_t));
  }
}

MinHasher::MinHasher(const MinHashParams& params) : params_(params), kernel_(detail::best_min_kernel().run) {
  LOOM_ASSERT(params.ngram > 0 && params.num_hashes() > 0, "ngram ", params.ngram, ", hashes ", params.num_hashes());
  uint64_t state = params.seed;
  for (uint32_t i = 0; i < params.num_hashes(); ++i) {
    a_.push_back(1 + splitmix64(state) % (kMersenne61 - 1));
    b_.push_back(splitmix64(state) % kMersenne61);
  }
}

void MinHasher::signature(const uint32_t* ids, size_t n, uint64_t* sig, std::vector<uint64_t>& scratch) const {
  shingles(ids, n, params_.ngram, scratch);
  kernel_(a_.data(), b_.data(), params_.num_hashes(), scratch.data(), scratch.size(), sig);
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
