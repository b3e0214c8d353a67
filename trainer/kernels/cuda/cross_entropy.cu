// Cross entropy over one chunk of bf16 logits, loss and gradient in one kernel: for each row
// (token) a block finds max, log-sum-exp, argmax, the label's logit and the logits' sum in one
// read, then overwrites the row with d(loss)/d(logits) in bf16. Replaces the fp32 cast, logsumexp,
// gather, argmax, exp, scale and scatter passes over a [tokens, V] block (about 13 GB of traffic
// per 2600 x 103168 chunk) with one read and one write of the bf16 logits where the row fits the
// block's shared memory (V * 2 bytes: up to V = 116k on an H100, whose 227 KB a block hold
// InternLM's 103168), and two reads and one write where it does not: the second read of a row
// came from memory, not L2: that kernel ran at 1.70x the time of one read and one write, the
// resident one at 1.51x (H100, NeMo's recipe: one 1024-thread block an SM).
#include <cfloat>
#include <mutex>
#include <unordered_map>

#include "common.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kVec = 8;  // bf16 per 16-byte load

struct Stats {
  float max, sum;   // running max and sum of exp(x - max)
  float best;       // argmax value
  int64_t best_at;  // argmax index (first occurrence on ties, as torch)
  float total;      // sum of the logits (label smoothing)
};

// Eight logits at indices j..j+7, in order: the running sum is rescaled once for the eight (at
// most), not at every new maximum, so the pass spends one exp a logit.
__device__ __forceinline__ void add8(Stats& s, const uint4& raw, int64_t j) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  float v[kVec];
#pragma unroll
  for (int p = 0; p < kVec / 2; ++p) {
    const float2 f = __bfloat1622float2(h[p]);
    v[2 * p] = f.x;
    v[2 * p + 1] = f.y;
  }
  float m = v[0];
#pragma unroll
  for (int i = 1; i < kVec; ++i) m = fmaxf(m, v[i]);
  if (m > s.max) {
    s.sum *= __expf(s.max - m);
    s.max = m;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    s.sum += __expf(v[i] - s.max);
    if (v[i] > s.best) {
      s.best = v[i];
      s.best_at = j + i;
    }
    s.total += v[i];
  }
}

__device__ __forceinline__ Stats merge(const Stats& a, const Stats& b) {
  Stats r;
  r.max = fmaxf(a.max, b.max);
  r.sum = (a.max == -FLT_MAX ? 0.0f : a.sum * __expf(a.max - r.max)) +
          (b.max == -FLT_MAX ? 0.0f : b.sum * __expf(b.max - r.max));
  const bool take_b = b.best > a.best || (b.best == a.best && b.best_at < a.best_at);
  r.best = take_b ? b.best : a.best;
  r.best_at = take_b ? b.best_at : a.best_at;
  r.total = a.total + b.total;
  return r;
}

__device__ Stats shuffle(const Stats& s, int offset) {
  Stats o;
  o.max = __shfl_xor_sync(0xffffffffu, s.max, offset);
  o.sum = __shfl_xor_sync(0xffffffffu, s.sum, offset);
  o.best = __shfl_xor_sync(0xffffffffu, s.best, offset);
  o.best_at = __shfl_xor_sync(0xffffffffu, s.best_at, offset);
  o.total = __shfl_xor_sync(0xffffffffu, s.total, offset);
  return o;
}

// Resident: the row is kept in dynamic shared memory (V * 2 bytes) between its read and the
// gradient's write, so memory sees one read and one write of it.
template <bool Resident>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(__nv_bfloat16* __restrict__ logits, int64_t V, const int64_t* __restrict__ labels,
                         int64_t ignore_index, float eps, float grad_scale, float* __restrict__ loss,
                         float* __restrict__ lse_out, bool* __restrict__ correct) {
  extern __shared__ uint4 row_cache[];
  const int64_t row = blockIdx.x;
  __nv_bfloat16* x = logits + row * V;
  const int64_t label = labels[row];
  const bool valid = label != ignore_index;
  // Read before any thread passes the barriers below and starts overwriting the row; a label
  // outside the vocabulary reads as -FLT_MAX (a huge loss, never a read outside the row), a -inf
  // logit at the label gives an infinite loss.
  const float label_logit =
      threadIdx.x == 0 && valid && label >= 0 && label < V ? __bfloat162float(x[label]) : -FLT_MAX;

  Stats s{-FLT_MAX, 0.0f, -FLT_MAX, 0, 0.0f};
  // Two loads in flight a thread before their values are used: one block an SM when resident.
  constexpr int64_t kStride = kThreads * kVec;
  for (int64_t j = threadIdx.x * kVec; j < V; j += 2 * kStride) {
    uint4 raw[2];
    const bool second = j + kStride < V;
    raw[0] = *reinterpret_cast<const uint4*>(x + j);
    if (second) raw[1] = *reinterpret_cast<const uint4*>(x + j + kStride);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && !second) break;
      const int64_t at = j + k * kStride;
      if (Resident) row_cache[at / kVec] = raw[k];
      add8(s, raw[k], at);
    }
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
    float l = lse - label_logit;
    if (eps > 0) l = (1.0f - eps) * l + eps * (lse - all.total / static_cast<float>(V));
    loss[row] = valid ? l : 0.0f;
    lse_out[row] = lse;
    correct[row] = valid && all.best_at == label;
  }
  // d(loss)/d(logits) = g * (softmax - target), target = (1 - eps) at the label + eps / V.
  const float g = valid ? grad_scale : 0.0f;
  const float uniform = g * eps / static_cast<float>(V);
  for (int64_t j = threadIdx.x * kVec; j < V; j += kStride) {
    // Each thread reads back the very elements it cached: no barrier needed.
    uint4 raw = Resident ? row_cache[j / kVec] : *reinterpret_cast<const uint4*>(x + j);
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

// The most dynamic shared memory a resident row may take on the current device: the device's
// opt-in limit a block less the kernel's own (the warps' Stats), allowed for the kernel once per
// device, so no thread's launch depends on what another thread set. 0 where a query fails: the
// two-read kernel runs, and the failure is cleared rather than left for the next launch's check.
int resident_limit() {
  static std::mutex mutex;
  static std::unordered_map<int, int> limits;  // by device
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = limits.find(device); it != limits.end()) return it->second;
  int optin = 0, limit = 0;
  cudaFuncAttributes attributes{};
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
      cudaFuncGetAttributes(&attributes, cross_entropy_kernel<true>) == cudaSuccess &&
      optin > static_cast<int>(attributes.sharedSizeBytes) &&
      cudaFuncSetAttribute(cross_entropy_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           optin - static_cast<int>(attributes.sharedSizeBytes)) == cudaSuccess) {
    limit = optin - static_cast<int>(attributes.sharedSizeBytes);
  } else {
    (void)cudaGetLastError();
  }
  limits.emplace(device, limit);
  return limit;
}

}  // namespace

const char* cross_entropy_bf16(void* logits, int64_t rows, int64_t V, const int64_t* labels, int64_t ignore_index,
                               float eps, float grad_scale, float* loss, float* lse, bool* correct, void* stream) {
  if (rows == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  auto* x = static_cast<__nv_bfloat16*>(logits);
  const int64_t row_bytes = V * static_cast<int64_t>(sizeof(__nv_bfloat16));
  if (row_bytes <= resident_limit()) {
    cross_entropy_kernel<true><<<static_cast<unsigned>(rows), kThreads, static_cast<size_t>(row_bytes), s>>>(
        x, V, labels, ignore_index, eps, grad_scale, loss, lse, correct);
  } else {
    cross_entropy_kernel<false><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, V, labels, ignore_index, eps,
                                                                                  grad_scale, loss, lse, correct);
  }
  return detail::launch_error();
}

}  // namespace loom::cuda
