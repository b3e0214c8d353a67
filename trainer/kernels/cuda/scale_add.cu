// out = x * s, or out += x * s, over bf16 tensors with the fp32 scale s read from the device: a
// gradient computed for an upstream gradient of 1 (the chunked loss's head weight) scaled by the
// real one and added into the parameter's gradient in one pass, fp32 arithmetic, one rounding.
// ATen took a cast to fp32, a multiply, a cast back and AccumulateGrad's add: five passes over
// [V, C] (the scale is no bf16 number, so it could not multiply in bf16).
#include <cstdint>

#include "common.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    scale_add_vec8(const __nv_bfloat16* __restrict__ x, const float* __restrict__ scale, __nv_bfloat16* __restrict__ out,
                   int64_t n8, bool accumulate) {
  const float s = *scale;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n8;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const uint4 xr = reinterpret_cast<const uint4*>(x)[i];
    uint4 orw = accumulate ? reinterpret_cast<const uint4*>(out)[i] : make_uint4(0, 0, 0, 0);
    const __nv_bfloat162* xh = reinterpret_cast<const __nv_bfloat162*>(&xr);
    __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&orw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 xf = __bfloat1622float2(xh[k]);
      const float2 of = accumulate ? __bfloat1622float2(oh[k]) : make_float2(0.0f, 0.0f);
      oh[k] = __floats2bfloat162_rn(fmaf(xf.x, s, of.x), fmaf(xf.y, s, of.y));
    }
    reinterpret_cast<uint4*>(out)[i] = orw;
  }
}

__global__ void __launch_bounds__(kThreads)
    scale_add_tail(const __nv_bfloat16* __restrict__ x, const float* __restrict__ scale, __nv_bfloat16* __restrict__ out,
                   int64_t begin, int64_t n, bool accumulate) {
  const int64_t i = begin + blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= n) return;
  const float o = accumulate ? __bfloat162float(out[i]) : 0.0f;
  out[i] = __float2bfloat16(fmaf(__bfloat162float(x[i]), *scale, o));
}

}  // namespace

const char* scale_add_bf16(const void* x, const float* scale, void* out, int64_t n, bool accumulate, void* stream) {
  if (n == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  auto* ob = static_cast<__nv_bfloat16*>(out);
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t n8 = aligned ? n / 8 : 0;
  if (n8 > 0) scale_add_vec8<<<detail::grid_for(n8, kThreads), kThreads, 0, s>>>(xb, scale, ob, n8, accumulate);
  if (n8 * 8 < n) {
    const int64_t rest = n - n8 * 8;
    scale_add_tail<<<static_cast<unsigned>((rest + kThreads - 1) / kThreads), kThreads, 0, s>>>(xb, scale, ob, n8 * 8,
                                                                                                n, accumulate);
  }
  return detail::launch_error();
}

}  // namespace loom::cuda
