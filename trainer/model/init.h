// Parameter initialisation on the training device, deterministic from a seed.
//
// The model's normal(0, std) weights are drawn by a counter-based generator: the value of element e
// of the parameter with index i (its position in named_parameters()) depends only on (seed, i, e).
// No generator state, no order of calls, no rank, no world size and no chunking enters it, so every
// rank of a job computes the same weights, a run at world size 1 starts from the weights each rank
// of a run at world size W starts from, and the work runs on the device as a few elementwise
// tensor ops (the 7B preset: about a second on an H200, no host copy of the weights).
//
//   key_i        = splitmix64(seed ^ splitmix64(i))                       (host, uint64)
//   bits(c)      = splitmix64(key_i + c * 0x9e3779b97f4a7c15)              (device, int64 ops, wrapping)
//   u(c)         = ((bits(c) >> 11) + 0.5) / 2^53                          in (0, 1), float64
//   pair p = elements 2p and 2p + 1, from counters 2p and 2p + 1 (Box-Muller, float64):
//     r = sqrt(-2 ln u(2p)),  t = 2 pi u(2p + 1)
//     z[2p] = r cos t,  z[2p + 1] = r sin t
//   w[e] = (dtype)(std * z[e])                                              (float64 -> dtype)
// where splitmix64(x): x ^= x >> 30; x *= 0xbf58476d1ce4e5b9; x ^= x >> 27; x *= 0x94d049bb133111eb;
// x ^= x >> 31 (logical shifts, arithmetic mod 2^64): SplitMix64's output function, whose
// consecutive outputs pass BigCrush.
//
// CPU and CUDA run the same integer ops, so the uniforms are bitwise equal everywhere. log, cos and
// sin in float64 may differ by an ulp between LibTorch's CPU (SLEEF, scalar libm in a vector's
// tail) and CUDA kernels; after the rounding to float32 that changes an element only where the
// float64 value lies within an ulp of a float32 rounding boundary (about 2^-28 of the elements; in
// bfloat16 about 2^-44). So a CPU and a CUDA run of one seed start from the same weights up to
// rare last-bit differences, and one machine type reproduces its own weights bitwise.
//
// loom-train uses this init on CUDA devices. On the CPU it builds InternLM(o) (model.h): torch's
// default generator, the weights CPU runs always had, which the CPU tests' references and
// tolerances were made with. So a CPU run and a CUDA run of one seed start from different draws of
// the same distribution; this init computed on the CPU (InternLM(o, {kCPU, seed}), tested there)
// equals the CUDA one up to the rare last bits above.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace loom {

// Where InternLMImpl allocates its parameters and the seed of the counter-based init above.
struct ModelInit {
  torch::Device device{torch::kCPU};
  uint64_t seed = 0;
};

// SplitMix64's output function on the host (the reference of the device ops).
uint64_t splitmix64(uint64_t x);
// key_i above.
uint64_t init_key(uint64_t seed, uint64_t parameter_index);
// z[first .. first + count) above, float64 on device (first even).
torch::Tensor counter_normal(uint64_t key, int64_t first, int64_t count, const torch::Device& device);
// Fills p (contiguous, any floating dtype and device) with std * z of key, in place, in chunks
// that bound the temporaries to a few hundred MiB.
void fill_counter_normal(torch::Tensor& p, double std, uint64_t key);

}  // namespace loom
