// Fused rotary embedding (rotate-half layout): one read and one write of q or k, in place of
// LibTorch's fp32 cast, narrow/cat of rotate_half, two products and a sum. The backward is the
// same rotation by the opposite angle.
#include "common.cuh"

namespace loom::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

template <typename T>
__global__ void rotary_kernel(const T* __restrict__ x, int64_t x_stride, const float* __restrict__ cos,
                              const float* __restrict__ sin, T* __restrict__ y, int64_t tokens, int64_t heads,
                              int64_t half, float sign) {
  const int64_t n = tokens * heads * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, th = idx / half, t = th / heads;
    const float c = cos[t * half + i], s = sign * sin[t * half + i];
    const int64_t in = t * x_stride + (th - t * heads) * 2 * half, out = th * 2 * half;
    const float a = to_f32(x[in + i]), b = to_f32(x[in + i + half]);
    y[out + i] = from_f32<T>(a * c - b * s);
    y[out + i + half] = from_f32<T>(b * c + a * s);
  }
}

}  // namespace

const char* rotary(Dtype dtype, const void* x, int64_t x_token_stride, const float* cos, const float* sin, void* y,
                   int64_t tokens, int64_t heads, int64_t D, bool inverse, void* stream) {
  const int64_t n = tokens * heads * (D / 2);
  if (n == 0) return nullptr;
  LOOM_CUDA_DISPATCH(dtype, rotary_kernel<T><<<detail::grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
                                static_cast<const T*>(x), x_token_stride, cos, sin, static_cast<T*>(y), tokens, heads, D / 2,
                                inverse ? -1.0f : 1.0f));
  return detail::launch_error();
}

}  // namespace loom::cuda
