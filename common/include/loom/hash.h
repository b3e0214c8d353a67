// XXH64 (seed 0), streaming: the checksum of shard .bin files and the tokenizer fingerprint.
// Chosen because it runs near memory bandwidth (verify --deep stays I/O bound) and Python checks it
// independently with Debian's python3-xxhash: xxhash.xxh64(data).intdigest().
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace loom {

class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  uint64_t v_[4];
  uint8_t buf_[32];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
  uint64_t seed_;
};

uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);
// XXH64 of a whole file's bytes (the SentencePiece model fingerprint).
uint64_t xxh64_file(const std::string& path);
// 16 lowercase hex digits.
std::string hex64(uint64_t v);

namespace detail {
inline constexpr uint64_t kXxhP1 = 0x9E3779B185EBCA87ULL, kXxhP2 = 0xC2B2AE3D27D4EB4FULL,
                          kXxhP3 = 0x165667B19E3779F9ULL, kXxhP4 = 0x85EBCA77C2B2AE63ULL,
                          kXxhP5 = 0x27D4EB2F165667C5ULL;
inline uint64_t xxh_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
}  // namespace detail

// xxh64(data, n, seed) for n < 32, inline: the tail rounds of XXH64's digest alone, with no
// streaming state or buffer copy. For hot loops over short keys (loom-dedup hashes every 4 * ngram
// byte window of every document); with a constant n the compiler unrolls it to a few multiplies.
inline uint64_t xxh64_short(const void* data, size_t n, uint64_t seed = 0) {
  using namespace detail;
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = seed + kXxhP5 + n;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);  // little-endian hosts, as hash.cpp
    h ^= xxh_rotl(v * kXxhP2, 31) * kXxhP1;
    h = xxh_rotl(h, 27) * kXxhP1 + kXxhP4;
  }
  if (n >= 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    h ^= uint64_t{v} * kXxhP1;
    h = xxh_rotl(h, 23) * kXxhP2 + kXxhP3;
    p += 4, n -= 4;
  }
  for (; n > 0; ++p, --n) {
    h ^= *p * kXxhP5;
    h = xxh_rotl(h, 11) * kXxhP1;
  }
  h ^= h >> 33;
  h *= kXxhP2;
  h ^= h >> 29;
  h *= kXxhP3;
  return h ^ (h >> 32);
}

}  // namespace loom
