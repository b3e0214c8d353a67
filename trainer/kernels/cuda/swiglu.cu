// Fused SwiGLU gate silu(a) * b and its backward: one pass each, in place of silu, product and
// (backward) sigmoid, silu and three products, each a full pass over [tokens, F]. Each pass can
// also measure its outputs' absolute maxima: the scales of the FP8 matmuls they feed. a and b (and
// da, db) are rows of `width` at a row stride of their own, so they can be the two halves of one
// [tokens, 2F] projection; y and dy are contiguous. Element i is at row i / width, column i % width.
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
__global__ void swiglu_fwd(const T* __restrict__ a, const T* __restrict__ b, int64_t ab_stride, T* __restrict__ y,
                           int64_t n, int64_t width, float* __restrict__ amax_y) {
  float m = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = i / width * ab_stride + i % width;
    const float av = to_f32(a[at]);
    const float yv = av / (1.0f + __expf(-av)) * to_f32(b[at]);
    y[i] = from_f32<T>(yv);
    m = fmaxf(m, stored_abs<T>(yv));
  }
  if (amax_y != nullptr) block_max_into(m, amax_y);
}

// silu'(a) = sig(a) * (1 + a * (1 - sig(a)))
template <typename T>
__global__ void swiglu_bwd(const T* __restrict__ dy, const T* __restrict__ a, const T* __restrict__ b,
                           int64_t ab_stride, T* __restrict__ da, T* __restrict__ db, int64_t dab_stride, int64_t n,
                           int64_t width, float* __restrict__ amax_da, float* __restrict__ amax_db) {
  float ma = 0, mb = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width, col = i % width, at = row * ab_stride + col, out = row * dab_stride + col;
    const float av = to_f32(a[at]), bv = to_f32(b[at]), g = to_f32(dy[i]);
    const float sig = 1.0f / (1.0f + __expf(-av));
    const float dav = g * bv * sig * (1.0f + av * (1.0f - sig)), dbv = g * av * sig;
    da[out] = from_f32<T>(dav);
    db[out] = from_f32<T>(dbv);
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

// Vector j covers elements 8j..8j+7 of one row (width % 8 == 0): width8 = width / 8 vectors a row.
__device__ __forceinline__ int64_t vec8_at(int64_t j, int64_t width8, int64_t stride) {
  return j / width8 * stride + j % width8 * 8;
}

__global__ void swiglu_fwd_vec8(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                                int64_t ab_stride, __nv_bfloat16* __restrict__ y, int64_t n8, int64_t width8,
                                float* __restrict__ amax_y) {
  float m = 0;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n8;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float av[8], bv[8], yv[8];
    const int64_t at = vec8_at(j, width8, ab_stride);
    load8(a, at, av);
    load8(b, at, bv);
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
                                const __nv_bfloat16* __restrict__ b, int64_t ab_stride, __nv_bfloat16* __restrict__ da,
                                __nv_bfloat16* __restrict__ db, int64_t dab_stride, int64_t n8, int64_t width8,
                                float* __restrict__ amax_da, float* __restrict__ amax_db) {
  float ma = 0, mb = 0;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n8;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float gv[8], av[8], bv[8], dav[8], dbv[8];
    const int64_t at = vec8_at(j, width8, ab_stride);
    load8(dy, j * 8, gv);
    load8(a, at, av);
    load8(b, at, bv);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float sig = 1.0f / (1.0f + __expf(-av[k]));
      dav[k] = gv[k] * bv[k] * sig * (1.0f + av[k] * (1.0f - sig));
      dbv[k] = gv[k] * av[k] * sig;
      ma = fmaxf(ma, stored_abs<__nv_bfloat16>(dav[k]));
      mb = fmaxf(mb, stored_abs<__nv_bfloat16>(dbv[k]));
    }
    const int64_t out = vec8_at(j, width8, dab_stride);
    store8(da, out, dav);
    store8(db, out, dbv);
  }
  if (amax_da != nullptr) block_max_into(ma, amax_da);
  if (amax_db != nullptr) block_max_into(mb, amax_db);
}

bool vec8(Dtype dtype, std::initializer_list<int64_t> widths, std::initializer_list<const void*> ptrs) {
  if (dtype != Dtype::kBFloat16) return false;
  for (const int64_t w : widths)
    if (w % 8 != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace

const char* swiglu_forward(Dtype dtype, const void* a, const void* b, int64_t ab_stride, void* y, int64_t rows,
                           int64_t width, float* amax_y, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (const char* e = detail::zero_maxima(s, amax_y)) return e;
  const int64_t n = rows * width;
  if (n == 0) return nullptr;
  if (vec8(dtype, {width, ab_stride}, {a, b, y})) {
    swiglu_fwd_vec8<<<detail::grid_for(n / 8), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(a),
                                                           static_cast<const __nv_bfloat16*>(b), ab_stride,
                                                           static_cast<__nv_bfloat16*>(y), n / 8, width / 8, amax_y);
    return detail::launch_error();
  }
  LOOM_CUDA_DISPATCH(dtype, swiglu_fwd<T><<<detail::grid_for(n), 256, 0, s>>>(static_cast<const T*>(a),
                                                                                static_cast<const T*>(b), ab_stride,
                                                                                static_cast<T*>(y), n, width, amax_y));
  return detail::launch_error();
}

const char* swiglu_backward(Dtype dtype, const void* dy, const void* a, const void* b, int64_t ab_stride, void* da,
                            void* db, int64_t dab_stride, int64_t rows, int64_t width, float* amax_da, float* amax_db,
                            void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (const char* e = detail::zero_maxima(s, amax_da, amax_db)) return e;
  const int64_t n = rows * width;
  if (n == 0) return nullptr;
  if (vec8(dtype, {width, ab_stride, dab_stride}, {dy, a, b, da, db})) {
    swiglu_bwd_vec8<<<detail::grid_for(n / 8), 256, 0, s>>>(
        static_cast<const __nv_bfloat16*>(dy), static_cast<const __nv_bfloat16*>(a),
        static_cast<const __nv_bfloat16*>(b), ab_stride, static_cast<__nv_bfloat16*>(da),
        static_cast<__nv_bfloat16*>(db), dab_stride, n / 8, width / 8, amax_da, amax_db);
    return detail::launch_error();
  }
  LOOM_CUDA_DISPATCH(dtype, swiglu_bwd<T><<<detail::grid_for(n), 256, 0, s>>>(
                                static_cast<const T*>(dy), static_cast<const T*>(a), static_cast<const T*>(b),
                                ab_stride, static_cast<T*>(da), static_cast<T*>(db), dab_stride, n, width, amax_da,
                                amax_db));
  return detail::launch_error();
}

}  // namespace loom::cuda
