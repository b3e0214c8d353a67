// Internal to loom_common: the id range scan shared by the shard and packed-shard readers.
#pragma once

#include <cstdint>

namespace loom::detail {

// Index of the first id >= vocab in [p, p+n), or n. A branch-free max scan first, so the common
// case (all valid) vectorises and runs at memory speed.
template <typename T>
uint64_t first_id_at_or_above(const T* p, uint64_t n, uint32_t vocab) {
  T mx = 0;
  for (uint64_t i = 0; i < n; ++i) mx = p[i] > mx ? p[i] : mx;
  if (static_cast<uint64_t>(mx) < vocab) return n;
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
