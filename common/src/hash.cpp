#include "loom/hash.h"

#include <cstring>
#include <vector>

#include "loom/sys.h"

namespace loom {

namespace {
constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t P2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t P3 = 0x165667B19E3779F9ULL;
constexpr uint64_t P4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t P5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // loom targets little-endian hosts (checked in shard_format.h)
  return v;
}
inline uint32_t read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t round1(uint64_t acc, uint64_t input) {
  acc += input * P2;
  acc = rotl(acc, 31);
  return acc * P1;
}
inline uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= round1(0, val);
  return acc * P1 + P4;
}
}  // namespace

Xxh64::Xxh64(uint64_t seed) : seed_(seed) {
  v_[0] = seed + P1 + P2;
  v_[1] = seed + P2;
  v_[2] = seed;
  v_[3] = seed - P1;
}

void Xxh64::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (buf_len_ + n < 32) {
    std::memcpy(buf_ + buf_len_, p, n);
    buf_len_ += n;
    return;
  }
  if (buf_len_ > 0) {
    size_t fill = 32 - buf_len_;
    std::memcpy(buf_ + buf_len_, p, fill);
    for (int i = 0; i < 4; ++i) v_[i] = round1(v_[i], read64(buf_ + 8 * i));
    p += fill;
    n -= fill;
    buf_len_ = 0;
  }
  uint64_t v0 = v_[0], v1 = v_[1], v2 = v_[2], v3 = v_[3];
  while (n >= 32) {
    v0 = round1(v0, read64(p));
    v1 = round1(v1, read64(p + 8));
    v2 = round1(v2, read64(p + 16));
    v3 = round1(v3, read64(p + 24));
    p += 32;
    n -= 32;
  }
  v_[0] = v0, v_[1] = v1, v_[2] = v2, v_[3] = v3;
  std::memcpy(buf_, p, n);
  buf_len_ = n;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (int i = 0; i < 4; ++i) h = merge_round(h, v_[i]);
  } else {
    h = seed_ + P5;
  }
  h += total_;
  const uint8_t* p = buf_;
  size_t n = buf_len_;
  while (n >= 8) {
    h ^= round1(0, read64(p));
    h = rotl(h, 27) * P1 + P4;
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    h ^= static_cast<uint64_t>(read32(p)) * P1;
    h = rotl(h, 23) * P2 + P3;
    p += 4;
    n -= 4;
  }
  while (n > 0) {
    h ^= (*p) * P5;
    h = rotl(h, 11) * P1;
    ++p;
    --n;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t n, uint64_t seed) {
  Xxh64 h(seed);
  h.update(data, n);
  return h.digest();
}

uint64_t xxh64_file(const std::string& path) {
  sys::File f = sys::File::open_read(path);
  std::vector<uint8_t> buf(1 << 20);
  Xxh64 h;
  for (size_t r; (r = f.read_some(buf.data(), buf.size())) > 0;) h.update(buf.data(), r);
  return h.digest();
}

std::string hex64(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = digits[v & 15];
  return s;
}

}  // namespace loom
