#include "init.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/error.h"

namespace loom {

namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;  // SplitMix64's increment
constexpr uint64_t kMul1 = 0xbf58476d1ce4e5b9ULL;
constexpr uint64_t kMul2 = 0x94d049bb133111ebULL;
// Pairs per chunk: 2^24 elements, i.e. int64 and float64 temporaries of 128 MiB each.
constexpr int64_t kChunkPairs = int64_t{1} << 23;

// The int64 with the bits of v (tensors hold int64; their arithmetic wraps as uint64's does).
int64_t bits_of(uint64_t v) {
  int64_t s = 0;
  std::memcpy(&s, &v, sizeof s);
  return s;
}

// x ^= x >> s with a logical shift, in place on an int64 tensor (its >> is arithmetic: the mask
// clears the copies of the sign bit).
void xor_shift(torch::Tensor& x, int s) {
  x.bitwise_xor_(torch::bitwise_right_shift(x, s).bitwise_and_(bits_of(~uint64_t{0} >> s)));
}

}  // namespace

uint64_t splitmix64(uint64_t x) {
  x ^= x >> 30;
  x *= kMul1;
  x ^= x >> 27;
  x *= kMul2;
  x ^= x >> 31;
  return x;
}

uint64_t init_key(uint64_t seed, uint64_t parameter_index) { return splitmix64(seed ^ splitmix64(parameter_index)); }

torch::Tensor counter_normal(uint64_t key, int64_t first, int64_t count, const torch::Device& device) {
  LOOM_ASSERT(first >= 0 && first % 2 == 0 && count >= 0, "counter_normal: first ", first, " must be even, count ",
              count, " >= 0");
  torch::NoGradGuard no_grad;
  const int64_t pairs = (count + 1) / 2;
  // The counters are the element indices: element e draws u(e), its pair partner u(e ^ 1).
  torch::Tensor x = torch::arange(first, first + 2 * pairs, torch::TensorOptions().dtype(torch::kInt64).device(device));
  x.mul_(bits_of(kGamma)).add_(bits_of(key));
  xor_shift(x, 30);
  x.mul_(bits_of(kMul1));
  xor_shift(x, 27);
  x.mul_(bits_of(kMul2));
  xor_shift(x, 31);
  const torch::Tensor u = torch::bitwise_right_shift(x, 11)
                              .bitwise_and_(bits_of((uint64_t{1} << 53) - 1))
                              .to(torch::kFloat64)
                              .add_(0.5)
                              .mul_(std::ldexp(1.0, -53))
                              .view({pairs, 2});
  const torch::Tensor r = u.select(1, 0).log().mul_(-2.0).sqrt_();
  const torch::Tensor t = u.select(1, 1).mul(2.0 * M_PI);
  return torch::stack({r * t.cos(), r * t.sin()}, 1).view({-1}).narrow(0, 0, count);
}

void fill_counter_normal(torch::Tensor& p, double std, uint64_t key) {
  LOOM_ASSERT(p.is_contiguous() && p.is_floating_point(), "fill_counter_normal: a contiguous floating tensor, got ",
              p.scalar_type(), " contiguous ", p.is_contiguous());
  torch::NoGradGuard no_grad;
  torch::Tensor flat = p.view({-1});
  const int64_t n = flat.numel();
  for (int64_t lo = 0; lo < n; lo += 2 * kChunkPairs) {
    const int64_t len = std::min(2 * kChunkPairs, n - lo);
    flat.narrow(0, lo, len).copy_(counter_normal(key, lo, len, p.device()).mul_(std));
  }
}

}  // namespace loom
