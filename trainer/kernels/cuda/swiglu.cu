// Fused SwiGLU gate silu(a) * b and its backward: one pass each, in place of silu, product and
// (backward) sigmoid, silu and three products, each a full pass over [tokens, F]. Each pass can
// also measure its outputs' absolute maxima: the scales of the FP8 matmuls they feed.
#include <cstdint>
#include <initializer_list>

#include "common.cuh"

namespace loom::cuda {
namespace {

using detail::block_max_into;
using detail::from_f32;
using detail::stored_abs;
using detail::to_f32;

template <typename T>
__global__ void swiglu_fwd(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, int64_t n,
                           float* __restrict__ amax_y) {
  float m = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float av = to_f32(a[i]);
    const float yv = av / (1.0f + __expf(-av)) * to_f32(b[i]);
    y[i] = from_f32<T>(yv);
    m = fmaxf(m, stored_abs<T>(yv));
  }
  if (amax_y != nullptr) block_max_into(m, amax_y);
}

// silu'(a) = sig(a) * (1 + a * (1 - sig(a)))
template <typename T>
__global__ void swiglu_bwd(const T* __restrict__ dy, const T* __restrict__ a, const T* __restrict__ b,
                           T* __restrict__ da, T* __restrict__ db, int64_t n, float* __restrict__ amax_da,
                           float* __restrict__ amax_db) {
  float ma = 0, mb = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float av = to_f32(a[i]), bv = to_f32(b[i]), g = to_f32(dy[i]);
    const float sig = 1.0f / (1.0f + __expf(-av));
    const float dav = g * bv * sig * (1.0f + av * (1.0f - sig)), dbv = g * av * sig;
    da[i] = from_f32<T>(dav);
    db[i] = from_f32<T>(dbv);
    ma = fmaxf(ma, stored_abs<T>(dav));
    mb = fmaxf(mb, stored_abs<T>(dbv));
  }
  if (amax_da != nullptr) block_max_into(ma, amax_da);
  if (amax_db != nullptr) block_max_into(mb, amax_db);
}

// bf16, 8 elements per thread: 16-byte loads and stores (the scalar kernels reached a third of
// the memory bandwidth on [8192, 5632]).
__device__ __forceinline__ void load8(const __nv_bfloat16* p, int64_t i, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p + i);
  const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) f[k] = __bfloat162float(h[k]);
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, int64_t i, const float (&f)[8]) {
  uint4 raw;
  __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(&raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) h[k] = __float2bfloat16(f[k]);
  *reinterpret_cast<uint4*>(p + i) = raw;
}

__global__ void swiglu_fwd_vec8(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                                __nv_bfloat16* __restrict__ y, int64_t n8, float* __restrict__ amax_y) {
  float m = 0;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n8;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float av[8], bv[8], yv[8];
    load8(a, j * 8, av);
    load8(b, j * 8, bv);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      yv[k] = av[k] / (1.0f + __expf(-av[k])) * bv[k];
      m = fmaxf(m, stored_abs<__nv_bfloat16>(yv[k]));
    }
    store8(y, j * 8, yv);
  }
  if (amax_y != nullptr) block_max_into(m, amax_y);
}

__global__ void swiglu_bwd_vec8(const __nv_bfloat16* __restrict__ dy, const __nv_bfloat16* __restrict__ a,
                                const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ da,
                                __nv_bfloat16* __restrict__ db, int64_t n8, float* __restrict__ amax_da,
                                float* __restrict__ amax_db) {
  float ma = 0, mb = 0;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n8;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float gv[8], av[8], bv[8], dav[8], dbv[8];
    load8(dy, j * 8, gv);
    load8(a, j * 8, av);
    load8(b, j * 8, bv);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float sig = 1.0f / (1.0f + __expf(-av[k]));
      dav[k] = gv[k] * bv[k] * sig * (1.0f + av[k] * (1.0f - sig));
      dbv[k] = gv[k] * av[k] * sig;
      ma = fmaxf(ma, stored_abs<__nv_bfloat16>(dav[k]));
      mb = fmaxf(mb, stored_abs<__nv_bfloat16>(dbv[k]));
    }
    store8(da, j * 8, dav);
    store8(db, j * 8, dbv);
  }
  if (amax_da != nullptr) block_max_into(ma, amax_da);
  if (amax_db != nullptr) block_max_into(mb, amax_db);
}

bool vec8(Dtype dtype, int64_t n, std::initializer_list<const void*> ptrs) {
  if (dtype != Dtype::kBFloat16 || n % 8 != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace

const char* swiglu_forward(Dtype dtype, const void* a, const void* b, void* y, int64_t n, float* amax_y,
                           void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (const char* e = detail::zero_maxima(s, amax_y)) return e;
  if (n == 0) return nullptr;
  if (vec8(dtype, n, {a, b, y})) {
    swiglu_fwd_vec8<<<detail::grid_for(n / 8), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(a),
                                                           static_cast<const __nv_bfloat16*>(b),
                                                           static_cast<__nv_bfloat16*>(y), n / 8, amax_y);
    return detail::launch_error();
  }
  LOOM_CUDA_DISPATCH(dtype, swiglu_fwd<T><<<detail::grid_for(n), 256, 0, s>>>(
                                static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n, amax_y));
  return detail::launch_error();
}

const char* swiglu_backward(Dtype dtype, const void* dy, const void* a, const void* b, void* da, void* db,
                            int64_t n, float* amax_da, float* amax_db, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (const char* e = detail::zero_maxima(s, amax_da, amax_db)) return e;
  if (n == 0) return nullptr;
  if (vec8(dtype, n, {dy, a, b, da, db})) {
    swiglu_bwd_vec8<<<detail::grid_for(n / 8), 256, 0, s>>>(
        static_cast<const __nv_bfloat16*>(dy), static_cast<const __nv_bfloat16*>(a),
        static_cast<const __nv_bfloat16*>(b), static_cast<__nv_bfloat16*>(da), static_cast<__nv_bfloat16*>(db), n / 8,
        amax_da, amax_db);
    return detail::launch_error();
  }
  LOOM_CUDA_DISPATCH(dtype, swiglu_bwd<T><<<detail::grid_for(n), 256, 0, s>>>(
                                static_cast<const T*>(dy), static_cast<const T*>(a), static_cast<const T*>(b),
                                static_cast<T*>(da), static_cast<T*>(db), n, amax_da, amax_db));
  return detail::launch_error();
}

}  // namespace loom::cuda
