// The embedding's gradient added into its existing bf16 gradient, row by row. Autograd's dense
// backward writes a fresh [V, C] gradient (a zero fill, the token rows, then AccumulateGrad's add
// reading two [V, C] tensors and writing one: about 0.9 ms a micro-batch on the 7b12's 103168 x
// 4096 on an H100) where a micro-batch touches at most its token count of rows. Here one block
// column per distinct token sums that token's rows of dy in fp32, in the rows' order (the ids are
// sorted stably, so the order is fixed: the same bits every run), and adds the sum to the gradient
// row with one rounding, where the dense path rounds twice (its [V, C] gradient, then the add).
// Atomics would round at every duplicate: index_put_ with accumulate measured 1.7-2.2% off a
// float64 sum on Zipf-like tokens (H100), so it was not kept.
#include <cstdint>

#include "common.cuh"

namespace loom::cuda {
namespace {

constexpr int kThreads = 128;  // each thread owns 8 columns (one 16-byte load a row)
constexpr int kAhead = 8;      // rows loaded before they are added, to hide the loads' latency

__global__ void __launch_bounds__(kThreads)
    embedding_grad_add(const int64_t* __restrict__ sorted_ids, const int64_t* __restrict__ order,
                       const __nv_bfloat16* __restrict__ dy, __nv_bfloat16* __restrict__ grad, int64_t n, int64_t C) {
  const int64_t first = blockIdx.x;
  const int64_t id = sorted_ids[first];
  if (first > 0 && sorted_ids[first - 1] == id) return;  // the token's first row adds the whole run
  const int64_t col = (static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x) * 8;
  if (col >= C) return;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = first;
  while (j < n && sorted_ids[j] == id) {
    uint4 rows[kAhead];
    int got = 0;
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      if (j + k < n && sorted_ids[j + k] == id) {
        rows[k] = *reinterpret_cast<const uint4*>(dy + order[j + k] * C + col);
        got = k + 1;
      }
    }
    // Added in the rows' order, whatever order the loads complete in.
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      if (k < got) detail::add_bf16x8(acc, rows[k]);
    }
    j += got;
  }
  uint4* out = reinterpret_cast<uint4*>(grad + id * C + col);
  uint4 g = *out;
  __nv_bfloat162* gh = reinterpret_cast<__nv_bfloat162*>(&g);
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const float2 f = __bfloat1622float2(gh[p]);
    gh[p] = __floats2bfloat162_rn(f.x + acc[2 * p], f.y + acc[2 * p + 1]);
  }
  *out = g;
}

}  // namespace

const char* embedding_grad_add_bf16(const int64_t* sorted_ids, const int64_t* order, const void* dy, void* grad,
                                    int64_t n, int64_t C, void* stream) {
  if (n == 0 || C == 0) return nullptr;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((C / 8 + kThreads - 1) / kThreads));
  embedding_grad_add<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      sorted_ids, order, static_cast<const __nv_bfloat16*>(dy), static_cast<__nv_bfloat16*>(grad), n, C);
  return detail::launch_error();
}

}  // namespace loom::cuda
