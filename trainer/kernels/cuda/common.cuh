// Shared by loom's .cu files: dtype conversion to fp32 and back, the dtype switch, error text.
#pragma once

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

// Blocks of 256 threads over n items, capped: kernels loop grid-stride past the cap.
inline unsigned grid_for(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
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
