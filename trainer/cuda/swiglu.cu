// Fused SwiGLU gate silu(a) * b and its backward: one pass each, in place of silu, product and
// (backward) sigmoid, silu and three products, each a full pass over [tokens, F].
#include "common.cuh"

namespace loom::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

template <typename T>
__global__ void swiglu_fwd(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float av = to_f32(a[i]);
    y[i] = from_f32<T>(av / (1.0f + __expf(-av)) * to_f32(b[i]));
  }
}

// silu'(a) = sig(a) * (1 + a * (1 - sig(a)))
template <typename T>
__global__ void swiglu_bwd(const T* __restrict__ dy, const T* __restrict__ a, const T* __restrict__ b,
                           T* __restrict__ da, T* __restrict__ db, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float av = to_f32(a[i]), bv = to_f32(b[i]), g = to_f32(dy[i]);
    const float sig = 1.0f / (1.0f + __expf(-av));
    da[i] = from_f32<T>(g * bv * sig * (1.0f + av * (1.0f - sig)));
    db[i] = from_f32<T>(g * av * sig);
  }
}

}  // namespace

const char* swiglu_forward(Dtype dtype, const void* a, const void* b, void* y, int64_t n, void* stream) {
  if (n == 0) return nullptr;
  LOOM_CUDA_DISPATCH(dtype, swiglu_fwd<T><<<detail::grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
                                static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n));
  return detail::launch_error();
}

const char* swiglu_backward(Dtype dtype, const void* dy, const void* a, const void* b, void* da, void* db,
                            int64_t n, void* stream) {
  if (n == 0) return nullptr;
  LOOM_CUDA_DISPATCH(dtype, swiglu_bwd<T><<<detail::grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
                                static_cast<const T*>(dy), static_cast<const T*>(a), static_cast<const T*>(b),
                                static_cast<T*>(da), static_cast<T*>(db), n));
  return detail::launch_error();
}

}  // namespace loom::cuda
