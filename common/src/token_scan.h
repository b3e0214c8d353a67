// Internal to loom_common: the id range scan shared by the shard and packed-shard readers.
#pragma once

#include <cstdint>

// The max scan is compiled twice on x86-64 and picked at load time: baseline SSE2 has no unsigned
// 16-bit max, so without AVX2 the uint16 loop does not vectorise and runs well below memory speed.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LOOM_SCAN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LOOM_SCAN_CLONES
#endif

namespace loom::detail {

// Largest id in [p, p+n): branch-free, so it vectorises.
LOOM_SCAN_CLONES static inline uint16_t max_id(const uint16_t* p, uint64_t n) {
  uint16_t mx = 0;
  for (uint64_t i = 0; i < n; ++i) mx = p[i] > mx ? p[i] : mx;
  return mx;
}
LOOM_SCAN_CLONES static inline uint32_t max_id(const uint32_t* p, uint64_t n) {
  uint32_t mx = 0;
  for (uint64_t i = 0; i < n; ++i) mx = p[i] > mx ? p[i] : mx;
  return mx;
}

// Index of the first id >= vocab in [p, p+n), or n. The max scan first, so the common case (all
// valid) runs at memory speed.
template <typename T>
uint64_t first_id_at_or_above(const T* p, uint64_t n, uint32_t vocab) {
  if (static_cast<uint64_t>(max_id(p, n)) < vocab) return n;
  for (uint64_t i = 0; i < n; ++i)
    if (static_cast<uint64_t>(p[i]) >= vocab) return i;
  return n;
}

// Same over a raw little-endian buffer of dtype_bytes-wide ids.
inline uint64_t first_id_at_or_above(const uint8_t* bytes, uint32_t dtype_bytes, uint64_t begin, uint64_t end,
                                     uint32_t vocab) {
  if (dtype_bytes == 2)
    return begin + first_id_at_or_above(reinterpret_cast<const uint16_t*>(bytes) + begin, end - begin, vocab);
  return begin + first_id_at_or_above(reinterpret_cast<const uint32_t*>(bytes) + begin, end - begin, vocab);
}

inline uint32_t load_id(const uint8_t* bytes, uint32_t dtype_bytes, uint64_t index) {
  if (dtype_bytes == 2) return reinterpret_cast<const uint16_t*>(bytes)[index];
  return reinterpret_cast<const uint32_t*>(bytes)[index];
}

}  // namespace loom::detail
