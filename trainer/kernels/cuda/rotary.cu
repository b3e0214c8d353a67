// Fused rotary embedding (rotate-half layout): one read and one write of q or k, in place of
// LibTorch's fp32 cast, narrow/cat of rotate_half, two products and a sum. The backward is the
// same rotation by the opposite angle. bf16 rows whose half dim is a multiple of 8 move 16 bytes
// per load (the element-wise kernel ran at a third of the memory bandwidth). v, which is not
// rotated, moves between the fused QKV tensor and its own with the same row-strided pattern.
#include <cstdint>

#include "common.cuh"

namespace loom::cuda {
namespace {

using detail::block_max_into;
using detail::from_f32;
using detail::stored_abs;
using detail::to_f32;

template <typename T>
__global__ void rotary_kernel(const T* __restrict__ x, int64_t x_stride, const float* __restrict__ cos,
                              const float* __restrict__ sin, T* __restrict__ y, int64_t y_stride, int64_t tokens,
                              int64_t heads, int64_t half, float sign, float* __restrict__ amax) {
  const int64_t n = tokens * heads * half;
  float m = 0;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, th = idx / half, t = th / heads, h = th - t * heads;
    const float c = cos[t * half + i], s = sign * sin[t * half + i];
    const int64_t in = t * x_stride + h * 2 * half, out = t * y_stride + h * 2 * half;
    const float a = to_f32(x[in + i]), b = to_f32(x[in + i + half]);
    const float ya = a * c - b * s, yb = b * c + a * s;
    y[out + i] = from_f32<T>(ya);
    y[out + i + half] = from_f32<T>(yb);
    m = fmaxf(m, fmaxf(stored_abs<T>(ya), stored_abs<T>(yb)));
  }
  if (amax != nullptr) block_max_into(m, amax);
}

// 8 consecutive pairs per thread: 16-byte loads of x's two halves, 32 bytes of cos and sin.
__global__ void rotary_kernel_vec8(const __nv_bfloat16* __restrict__ x, int64_t x_stride, const float* __restrict__ cos,
                                   const float* __restrict__ sin, __nv_bfloat16* __restrict__ y, int64_t y_stride,
                                   int64_t tokens, int64_t heads, int64_t half, float sign, float* __restrict__ amax) {
  const int64_t groups = half / 8, n = tokens * heads * groups;
  float m = 0;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = (idx % groups) * 8, th = idx / groups, t = th / heads, h = th - t * heads;
    const int64_t in = t * x_stride + h * 2 * half + i, out = t * y_stride + h * 2 * half + i;
    const uint4 araw = *reinterpret_cast<const uint4*>(x + in);
    const uint4 braw = *reinterpret_cast<const uint4*>(x + in + half);
    const float4 c0 = *reinterpret_cast<const float4*>(cos + t * half + i);
    const float4 c1 = *reinterpret_cast<const float4*>(cos + t * half + i + 4);
    const float4 s0 = *reinterpret_cast<const float4*>(sin + t * half + i);
    const float4 s1 = *reinterpret_cast<const float4*>(sin + t * half + i + 4);
    const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
    const __nv_bfloat16* a = reinterpret_cast<const __nv_bfloat16*>(&araw);
    const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&braw);
    uint4 ya, yb;
    __nv_bfloat16* yav = reinterpret_cast<__nv_bfloat16*>(&ya);
    __nv_bfloat16* ybv = reinterpret_cast<__nv_bfloat16*>(&yb);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float av = __bfloat162float(a[k]), bv = __bfloat162float(b[k]), sk = sign * s[k];
      yav[k] = __float2bfloat16(av * c[k] - bv * sk);
      ybv[k] = __float2bfloat16(bv * c[k] + av * sk);
      m = fmaxf(m, fmaxf(fabsf(__bfloat162float(yav[k])), fabsf(__bfloat162float(ybv[k]))));
    }
    *reinterpret_cast<uint4*>(y + out) = ya;
    *reinterpret_cast<uint4*>(y + out + half) = yb;
  }
  if (amax != nullptr) block_max_into(m, amax);
}

// Row r's `row_words` words of V from x + r * x_stride to y + r * y_stride (strides in bytes);
// with amax, the largest |element| copied, the words read as elements of T.
template <typename V, typename T>
__global__ void copy_rows_kernel(const char* __restrict__ x, int64_t x_stride, char* __restrict__ y, int64_t y_stride,
                                 int64_t rows, int64_t row_words, float* __restrict__ amax) {
  static_assert(sizeof(V) % sizeof(T) == 0, "a word holds whole elements");
  const int64_t n = rows * row_words;
  float m = 0;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / row_words, w = idx - r * row_words;
    const V word = *reinterpret_cast<const V*>(x + r * x_stride + w * sizeof(V));
    *reinterpret_cast<V*>(y + r * y_stride + w * sizeof(V)) = word;
    if (amax != nullptr) {
      const T* e = reinterpret_cast<const T*>(&word);
#pragma unroll
      for (int k = 0; k < static_cast<int>(sizeof(V) / sizeof(T)); ++k) m = fmaxf(m, fabsf(to_f32(e[k])));
    }
  }
  if (amax != nullptr) block_max_into(m, amax);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename V, typename T>
const char* launch_copy_rows(const void* x, int64_t x_stride, void* y, int64_t y_stride, int64_t rows, int64_t bytes,
                             float* amax, cudaStream_t s) {
  const int64_t words = bytes / static_cast<int64_t>(sizeof(V));
  copy_rows_kernel<V, T><<<detail::grid_for(rows * words), 256, 0, s>>>(
      static_cast<const char*>(x), x_stride, static_cast<char*>(y), y_stride, rows, words, amax);
  return detail::launch_error();
}

}  // namespace

const char* rotary(Dtype dtype, const void* x, int64_t x_token_stride, const float* cos, const float* sin, void* y,
                   int64_t y_token_stride, int64_t tokens, int64_t heads, int64_t D, bool inverse, float* amax,
                   void* stream) {
  const int64_t half = D / 2, n = tokens * heads * half;
  if (n == 0) return nullptr;
  const float sign = inverse ? -1.0f : 1.0f;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == Dtype::kBFloat16 && half % 8 == 0 && x_token_stride % 8 == 0 && y_token_stride % 8 == 0 &&
      aligned16(x) && aligned16(y) && aligned16(cos) && aligned16(sin)) {
    rotary_kernel_vec8<<<detail::grid_for(n / 8), 256, 0, s>>>(
        static_cast<const __nv_bfloat16*>(x), x_token_stride, cos, sin, static_cast<__nv_bfloat16*>(y), y_token_stride,
        tokens, heads, half, sign, amax);
    return detail::launch_error();
  }
  LOOM_CUDA_DISPATCH(dtype, rotary_kernel<T><<<detail::grid_for(n), 256, 0, s>>>(
                                static_cast<const T*>(x), x_token_stride, cos, sin, static_cast<T*>(y), y_token_stride,
                                tokens, heads, half, sign, amax));
  return detail::launch_error();
}

const char* copy_rows(Dtype dtype, const void* x, int64_t x_token_stride, void* y, int64_t y_token_stride,
                      int64_t tokens, int64_t width, float* amax, void* stream) {
  if (tokens == 0 || width == 0) return nullptr;
  const int64_t es = dtype == Dtype::kBFloat16 ? 2 : 4;
  const int64_t bytes = width * es, xs = x_token_stride * es, ys = y_token_stride * es;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto all_multiples_of = [&](int64_t k) {
    return bytes % k == 0 && xs % k == 0 && ys % k == 0 && reinterpret_cast<uintptr_t>(x) % k == 0 &&
           reinterpret_cast<uintptr_t>(y) % k == 0;
  };
  if (dtype == Dtype::kFloat32) {
    if (all_multiples_of(16)) return launch_copy_rows<uint4, float>(x, xs, y, ys, tokens, bytes, amax, s);
    return launch_copy_rows<uint32_t, float>(x, xs, y, ys, tokens, bytes, amax, s);
  }
  if (all_multiples_of(16)) return launch_copy_rows<uint4, __nv_bfloat16>(x, xs, y, ys, tokens, bytes, amax, s);
  if (all_multiples_of(4)) return launch_copy_rows<uint32_t, __nv_bfloat16>(x, xs, y, ys, tokens, bytes, amax, s);
  return launch_copy_rows<uint16_t, __nv_bfloat16>(x, xs, y, ys, tokens, bytes, amax, s);
}

}  // namespace loom::cuda
