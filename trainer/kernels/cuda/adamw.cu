// AdamW over fp32 master weights with bf16 gradients, one pass: reads the bf16 gradient as it is
// (no fp32 copy of every gradient), scales it (the clip coefficient), updates the weight and both
// moments, and optionally writes the weight's bf16 copy (the model's parameter) in the same pass.
// ATen's fused kernel needs gradients in the weights' dtype: a cast pass before it and a copy
// pass after it moved 12 of every 40 bytes per parameter. The bf16 copy's absolute maximum comes
// out of the same pass when asked for: an FP8 forward would otherwise read the weight once more
// to find its scale.
#include <cstdint>

#include "common.cuh"

namespace loom::cuda {
namespace {

using detail::to_f32;

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16384;  // elements per block

struct Batch {
  float* p[kAdamWMaxTensors];
  float* m[kAdamWMaxTensors];
  float* v[kAdamWMaxTensors];
  const __nv_bfloat16* g[kAdamWMaxTensors];
  __nv_bfloat16* out[kAdamWMaxTensors];
  float* amax[kAdamWMaxTensors];
  int64_t n[kAdamWMaxTensors];
  int64_t block_start[kAdamWMaxTensors + 1];
  int count;
};

struct Scalars {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
};

__device__ __forceinline__ void update(float& p, float& m, float& v, float g, const Scalars& s, float step_size,
                                       float bc2_sqrt) {
  g *= s.grad_scale;
  p -= s.lr * s.weight_decay * p;  // decoupled weight decay, as ATen's fused AdamW
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  p -= step_size * m / (sqrtf(v) / bc2_sqrt + s.eps);
}

// Zeroes the maxima a launch is about to take, unless the update is skipped: they then keep
// describing the weights, which stay as they were.
__global__ void zero_amax(Batch b, const float* __restrict__ found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  if (threadIdx.x < b.count && b.amax[threadIdx.x] != nullptr) *b.amax[threadIdx.x] = 0.0f;
}

__global__ void __launch_bounds__(kThreads) adamw_kernel(Batch b, Scalars s, const float* __restrict__ step,
                                                         const float* __restrict__ found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const int64_t block = blockIdx.x;
  int t = 0;
  while (t + 1 < b.count && b.block_start[t + 1] <= block) ++t;
  const int64_t begin = (block - b.block_start[t]) * kChunk;
  const int64_t end = begin + kChunk < b.n[t] ? begin + kChunk : b.n[t];
  const float st = *step;
  const float step_size = s.lr / (1.0f - powf(s.beta1, st));
  const float bc2_sqrt = sqrtf(1.0f - powf(s.beta2, st));
  float* __restrict__ p = b.p[t];
  float* __restrict__ m = b.m[t];
  float* __restrict__ v = b.v[t];
  const __nv_bfloat16* __restrict__ g = b.g[t];
  __nv_bfloat16* __restrict__ out = b.out[t];
  float* amax = out != nullptr ? b.amax[t] : nullptr;
  float m_out = 0.0f;  // the largest |out| this thread wrote
  const bool aligned = ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(m) |
                         reinterpret_cast<uintptr_t>(v)) % 16 == 0) &&
                       ((reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(out)) % 8 == 0);
  int64_t i = begin + threadIdx.x * 4;
  if (aligned) {
    for (; i + 4 <= end; i += kThreads * 4) {
      float4 pv = *reinterpret_cast<const float4*>(p + i);
      float4 mv = *reinterpret_cast<const float4*>(m + i);
      float4 vv = *reinterpret_cast<const float4*>(v + i);
      const uint2 graw = *reinterpret_cast<const uint2*>(g + i);
      const __nv_bfloat162 g01 = *reinterpret_cast<const __nv_bfloat162*>(&graw.x);
      const __nv_bfloat162 g23 = *reinterpret_cast<const __nv_bfloat162*>(&graw.y);
      update(pv.x, mv.x, vv.x, __low2float(g01), s, step_size, bc2_sqrt);
      update(pv.y, mv.y, vv.y, __high2float(g01), s, step_size, bc2_sqrt);
      update(pv.z, mv.z, vv.z, __low2float(g23), s, step_size, bc2_sqrt);
      update(pv.w, mv.w, vv.w, __high2float(g23), s, step_size, bc2_sqrt);
      *reinterpret_cast<float4*>(p + i) = pv;
      *reinterpret_cast<float4*>(m + i) = mv;
      *reinterpret_cast<float4*>(v + i) = vv;
      if (out != nullptr) {
        uint2 o;
        const __nv_bfloat162 o01 = __floats2bfloat162_rn(pv.x, pv.y), o23 = __floats2bfloat162_rn(pv.z, pv.w);
        *reinterpret_cast<__nv_bfloat162*>(&o.x) = o01;
        *reinterpret_cast<__nv_bfloat162*>(&o.y) = o23;
        *reinterpret_cast<uint2*>(out + i) = o;
        const float2 f01 = __bfloat1622float2(o01), f23 = __bfloat1622float2(o23);
        m_out = fmaxf(m_out, fmaxf(fmaxf(fabsf(f01.x), fabsf(f01.y)), fmaxf(fabsf(f23.x), fabsf(f23.y))));
      }
    }
    // The tail (end - begin not a multiple of 4 here): element by element below.
    if (i < end) {
      for (int64_t j = i; j < i + 4 && j < end; ++j) {
        float pj = p[j], mj = m[j], vj = v[j];
        update(pj, mj, vj, to_f32(g[j]), s, step_size, bc2_sqrt);
        p[j] = pj, m[j] = mj, v[j] = vj;
        if (out != nullptr) {
          out[j] = __float2bfloat16(pj);
          m_out = fmaxf(m_out, detail::stored_abs<__nv_bfloat16>(pj));
        }
      }
    }
    if (amax != nullptr) detail::block_max_into(m_out, amax);
    return;
  }
  for (int64_t j = begin + threadIdx.x; j < end; j += kThreads) {
    float pj = p[j], mj = m[j], vj = v[j];
    update(pj, mj, vj, to_f32(g[j]), s, step_size, bc2_sqrt);
    p[j] = pj, m[j] = mj, v[j] = vj;
    if (out != nullptr) {
      out[j] = __float2bfloat16(pj);
      m_out = fmaxf(m_out, detail::stored_abs<__nv_bfloat16>(pj));
    }
  }
  if (amax != nullptr) detail::block_max_into(m_out, amax);
}

}  // namespace

const char* adamw_bf16_grads(const AdamWTensor* tensors, int64_t count, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float grad_scale, const float* step, const float* found_inf,
                             void* stream) {
  const Scalars s{lr, beta1, beta2, eps, weight_decay, grad_scale};
  for (int64_t first = 0; first < count; first += kAdamWMaxTensors) {
    Batch b{};
    b.count = 0;
    bool wants_amax = false;
    int64_t blocks = 0;
    for (int64_t k = first; k < count && k < first + kAdamWMaxTensors; ++k) {
      const AdamWTensor& t = tensors[k];
      if (t.n == 0) continue;
      const int c = b.count++;
      b.p[c] = t.p, b.m[c] = t.m, b.v[c] = t.v;
      b.g[c] = static_cast<const __nv_bfloat16*>(t.g);
      b.out[c] = static_cast<__nv_bfloat16*>(t.out);
      b.amax[c] = t.out != nullptr ? t.amax : nullptr;
      wants_amax = wants_amax || b.amax[c] != nullptr;
      b.n[c] = t.n;
      b.block_start[c] = blocks;
      blocks += (t.n + kChunk - 1) / kChunk;
    }
    if (b.count == 0) continue;
    b.block_start[b.count] = blocks;
    if (wants_amax) zero_amax<<<1, kAdamWMaxTensors, 0, static_cast<cudaStream_t>(stream)>>>(b, found_inf);
    adamw_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(b, s, step,
                                                                                                     found_inf);
    if (const char* e = detail::launch_error()) return e;
  }
  return nullptr;
}

}  // namespace loom::cuda
