// The largest shapes loom-train builds and plans, and the checked arithmetic of their sizes.
//
// Each size key has an upper bound that every real model respects with room to spare, so that a
// typo or a hostile value is refused at once, naming the key and its bound, rather than planned
// in wrapped bytes, divided by a wrapped zero or built one layer at a time:
//   model.hidden_size   C  <= 2^20        (the largest published models use 2^14)
//   model.num_layers    N  <= 2^16
//   model.vocab_size    V  <= 2^31 - 1    (every token id fits the shards' signed 32-bit bos/eos)
//   model.mlp_ratio        in (0, 64]
//   data.seq_len        T  <= 2^24
//   data.micro_bsz      B  <= 2^20
//   data.micro_num         <= 2^20
//   the world size         <= 2^20 ranks
// The bounds alone do not keep products in 64 bits (the masked path's B H T T probabilities reach
// 2^88 within them), so every size the memory plan and the parameter count form is a Size, whose
// + and * throw SizeOverflow instead of wrapping; the plan and the model turn it into a message
// naming their keys.
#pragma once

#include <cstdint>
#include <type_traits>

#include "loom/error.h"

namespace loom {

inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 20;
inline constexpr int64_t kMaxNumLayers = int64_t{1} << 16;
inline constexpr int64_t kMaxVocabSize = (int64_t{1} << 31) - 1;
inline constexpr double kMaxMlpRatio = 64;
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;
inline constexpr int64_t kMaxMicroBsz = int64_t{1} << 20;
inline constexpr int64_t kMaxMicroNum = int64_t{1} << 20;
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 20;

// Throws loom::Error "KEY must be in [1, MAX], got VALUE" unless 1 <= value <= max.
inline void check_size_key(const char* key, int64_t value, int64_t max) {
  LOOM_CHECK(value >= 1 && value <= max, key, " must be in [1, ", max, "], got ", value,
             " (loom-train's size limits: docs/TRAIN.md)");
}

// The shape of one micro-batch and the accumulation, against their limits (data.* keys).
inline void check_batch_limits(int64_t micro_bsz, int64_t seq_len, int64_t micro_num) {
  check_size_key("data.micro_bsz", micro_bsz, kMaxMicroBsz);
  check_size_key("data.seq_len", seq_len, kMaxSeqLen);
  check_size_key("data.micro_num", micro_num, kMaxMicroNum);
}

// A result that does not fit in 64 bits: "A x B exceeds 2^64 - 1".
class SizeOverflow : public Error {
 public:
  using Error::Error;
};

// A count of elements or bytes whose arithmetic is checked (__builtin_*_overflow). Built from any
// integer; a negative one is a broken invariant (the keys were checked before).
class Size {
 public:
  template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
  Size(T v) : v_(static_cast<uint64_t>(v)) {  // implicit, so that formulas read as formulas
    if constexpr (std::is_signed_v<T>) LOOM_ASSERT(v >= 0, "a size of ", v);
  }
  uint64_t value() const { return v_; }

  friend Size operator+(Size a, Size b) {
    uint64_t r = 0;
    if (__builtin_add_overflow(a.v_, b.v_, &r)) throw SizeOverflow(str(a.v_, " + ", b.v_, " exceeds 2^64 - 1"));
    return Size(r);
  }
  friend Size operator*(Size a, Size b) {
    uint64_t r = 0;
    if (__builtin_mul_overflow(a.v_, b.v_, &r)) throw SizeOverflow(str(a.v_, " x ", b.v_, " exceeds 2^64 - 1"));
    return Size(r);
  }
  friend Size operator-(Size a, Size b) {
    LOOM_ASSERT(a.v_ >= b.v_, a.v_, " - ", b.v_, " is negative");
    return Size(a.v_ - b.v_);
  }
  friend Size operator/(Size a, Size b) {
    LOOM_ASSERT(b.v_ != 0, a.v_, " / 0");
    return Size(a.v_ / b.v_);
  }
  Size& operator+=(Size b) { return *this = *this + b; }
  friend bool operator<(Size a, Size b) { return a.v_ < b.v_; }
  friend bool operator>(Size a, Size b) { return a.v_ > b.v_; }
  friend bool operator==(Size a, Size b) { return a.v_ == b.v_; }

 private:
  uint64_t v_;
};

}  // namespace loom
