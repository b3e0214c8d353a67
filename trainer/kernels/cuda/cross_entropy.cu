// Cross entropy over one chunk of bf16 logits, loss and gradient in one kernel: for each row
// (token) a block finds max, log-sum-exp, argmax, the label's logit and the logits' sum in one
// read, then overwrites the row with d(loss)/d(logits) in bf16. Replaces the fp32 cast, logsumexp,
// gather, argmax, exp, scale and scatter passes over a [tokens, V] block (about 13 GB of traffic
// per 2600 x 103168 chunk) with two reads and one write of the bf16 logits.
#include <cfloat>

#include "common.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kVec = 8;  // bf16 per 16-byte load

struct Stats {
  float max, sum;     // running max and sum of exp(x - max)
  float best;         // argmax value
  int64_t best_at;    // argmax index (first occurrence on ties, as torch)
  float label_logit;  // -inf unless this thread saw the label
  float total;        // sum of the logits (label smoothing)
};

__device__ __forceinline__ void add(Stats& s, float x, int64_t j, int64_t label) {
  if (x > s.max) {
    s.sum = s.sum * __expf(s.max - x) + 1.0f;
    s.max = x;
  } else {
    s.sum += __expf(x - s.max);
  }
  if (x > s.best) {
    s.best = x;
    s.best_at = j;
  }
  if (j == label) s.label_logit = x;
  s.total += x;
}

__device__ __forceinline__ Stats merge(const Stats& a, const Stats& b) {
  Stats r;
  r.max = fmaxf(a.max, b.max);
  r.sum = (a.max == -FLT_MAX ? 0.0f : a.sum * __expf(a.max - r.max)) +
          (b.max == -FLT_MAX ? 0.0f : b.sum * __expf(b.max - r.max));
  const bool take_b = b.best > a.best || (b.best == a.best && b.best_at < a.best_at);
  r.best = take_b ? b.best : a.best;
  r.best_at = take_b ? b.best_at : a.best_at;
  r.label_logit = fmaxf(a.label_logit, b.label_logit);
  r.total = a.total + b.total;
  return r;
}

__device__ Stats shuffle(const Stats& s, int offset) {
  Stats o;
  o.max = __shfl_xor_sync(0xffffffffu, s.max, offset);
  o.sum = __shfl_xor_sync(0xffffffffu, s.sum, offset);
  o.best = __shfl_xor_sync(0xffffffffu, s.best, offset);
  o.best_at = __shfl_xor_sync(0xffffffffu, s.best_at, offset);
  o.label_logit = __shfl_xor_sync(0xffffffffu, s.label_logit, offset);
  o.total = __shfl_xor_sync(0xffffffffu, s.total, offset);
  return o;
}

__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(__nv_bfloat16* __restrict__ logits, int64_t V, const int64_t* __restrict__ labels,
                         int64_t ignore_index, float eps, float grad_scale, float* __restrict__ loss,
                         float* __restrict__ lse_out, bool* __restrict__ correct) {
  const int64_t row = blockIdx.x;
  __nv_bfloat16* x = logits + row * V;
  const int64_t label = labels[row];
  const bool valid = label != ignore_index;

  Stats s{-FLT_MAX, 0.0f, -FLT_MAX, 0, -FLT_MAX, 0.0f};
  for (int64_t j = threadIdx.x * kVec; j < V; j += kThreads * kVec) {
    const uint4 raw = *reinterpret_cast<const uint4*>(x + j);
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec; ++i) add(s, __bfloat162float(e[i]), j + i, label);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s = merge(s, shuffle(s, o));
  __shared__ Stats warp[kThreads / 32];
  __shared__ Stats all;
  if (threadIdx.x % 32 == 0) warp[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    Stats w = warp[threadIdx.x];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w = merge(w, shuffle(w, o));
    if (threadIdx.x == 0) all = w;
  }
  __syncthreads();
  const float lse = all.max + __logf(all.sum);
  if (threadIdx.x == 0) {
    float l = lse - all.label_logit;
    if (eps > 0) l = (1.0f - eps) * l + eps * (lse - all.total / static_cast<float>(V));
    loss[row] = valid ? l : 0.0f;
    lse_out[row] = lse;
    correct[row] = valid && all.best_at == label;
  }
  // d(loss)/d(logits) = g * (softmax - target), target = (1 - eps) at the label + eps / V.
  const float g = valid ? grad_scale : 0.0f;
  const float uniform = g * eps / static_cast<float>(V);
  for (int64_t j = threadIdx.x * kVec; j < V; j += kThreads * kVec) {
    uint4 raw = *reinterpret_cast<const uint4*>(x + j);
    __nv_bfloat16* e = reinterpret_cast<__nv_bfloat16*>(&raw);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float d = g * __expf(__bfloat162float(e[i]) - lse) - uniform;
      if (j + i == label) d -= g * (1.0f - eps);
      e[i] = __float2bfloat16(d);
    }
    *reinterpret_cast<uint4*>(x + j) = raw;
  }
}

}  // namespace

const char* cross_entropy_bf16(void* logits, int64_t rows, int64_t V, const int64_t* labels, int64_t ignore_index,
                               float eps, float grad_scale, float* loss, float* lse, bool* correct, void* stream) {
  if (rows == 0) return nullptr;
  cross_entropy_kernel<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<__nv_bfloat16*>(logits), V, labels, ignore_index, eps, grad_scale, loss, lse, correct);
  return detail::launch_error();
}

}  // namespace loom::cuda
