// Shared by loom's .cu files: dtype conversion to fp32 and back, the dtype switch, error text.
#pragma once

#include <initializer_list>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels.h"

namespace loom::cuda::detail {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// acc[i] += the i-th of the eight bf16 in v (one 16-byte load), in fp32.
__device__ __forceinline__ void add_bf16x8(float (&acc)[8], const uint4& v) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const float2 f = __bfloat1622float2(h[p]);
    acc[2 * p] += f.x;
    acc[2 * p + 1] += f.y;
  }
}

// Blocks of 256 threads over n items, capped: kernels loop grid-stride past the cap.
inline unsigned grid_for(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

// Sum over a block of Threads threads, returned to every thread, the warps' sums added in warp
// order. Safe to call repeatedly (syncs before reusing its shared memory).
template <int Threads>
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[Threads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0;
#pragma unroll
  for (int i = 0; i < Threads / 32; ++i) s += partial[i];
  return s;
}

// The largest |value| a block saw, folded into *out with one atomic per block. m >= 0 and fmaxf
// (which skips NaN, as loom's FP8 amax does): the bits of a non-negative float order as the float
// does, so atomicMax on them as int is a float max. Every thread of the block must call it.
__device__ __forceinline__ void block_max_into(float m, float* out) {
  __shared__ float partial[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __syncthreads();  // partial may still be read by a previous call
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned w = 1; w < (blockDim.x + 31) / 32; ++w) m = fmaxf(m, partial[w]);
    atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));
  }
}

// |x| as the dtype T stores it: what a reader of the rounded output measures.
template <typename T>
__device__ __forceinline__ float stored_abs(float x) {
  return fabsf(to_f32(from_f32<T>(x)));
}

// Zeroes, on the stream, the optional maxima a launch is about to take (nullptr: none). Returns
// the error's text, or nullptr.
inline const char* zero_maxima(cudaStream_t stream, float* a, float* b = nullptr) {
  for (float* p : {a, b})
    if (p != nullptr)
      if (const cudaError_t e = cudaMemsetAsync(p, 0, sizeof(float), stream); e != cudaSuccess)
        return cudaGetErrorString(e);
  return nullptr;
}

inline const char* launch_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace loom::cuda::detail

// Instantiates BODY with T = the storage type of `dtype`.
#define LOOM_CUDA_DISPATCH(dtype, ...)        \
  do {                                        \
    if ((dtype) == ::loom::cuda::Dtype::kBFloat16) { \
      using T = __nv_bfloat16;                \
      __VA_ARGS__;                            \
    } else {                                  \
      using T = float;                        \
      __VA_ARGS__;                            \
    }                                         \
  } while (0)
