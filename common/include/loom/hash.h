// XXH64 (seed 0), streaming: the checksum of shard .bin files and the tokenizer fingerprint.
// Chosen because it runs near memory bandwidth (verify --deep stays I/O bound) and Python checks it
// independently with Debian's python3-xxhash: xxhash.xxh64(data).intdigest().
#pragma once

#include <cstddef>
#include <cstdint>
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

}  // namespace loom
