// Fused CPU kernels for the memory-bound pieces of an InternLM layer in fp32, as autograd
// functions: the CPU counterparts of trainer/kernels/cuda/*.cu, reached through trainer/kernels/fused_ops.h. Each
// is one pass over the activations forward and one backward (plain loops the compiler vectorises,
// split over rows/tokens with at::parallel_for), in place of LibTorch's chain of pow, mean, rsqrt,
// cat, neg, silu and products, each a full read and write of the tensor.
//
// Every result is bitwise the same from run to run, for any number of threads and in the AVX2 and
// baseline copies of the loops (x86-64, picked at load time): elementwise work does not depend on
// the split, row sums run in 8 fixed lanes, the one reduction across rows (RMSNorm's weight
// gradient) sums fixed chunks of rows in a fixed order, and no copy contracts to FMA.
//
// Shape letters as trainer/core/batch.h: B T C H K D F; "rows" are all leading dims flattened.
#pragma once

#include <vector>

#include <torch/torch.h>

namespace loom::cpu {

// Whether t is a tensor these kernels take: CPU, fp32. Any layout (inputs are made contiguous).
bool kernels_apply(const torch::Tensor& t);

// RMSNorm of x [..., C] with weight [C]: y = w * x * rstd, rstd = 1 / sqrt(mean(x^2) + eps) per row
// (saved for backward). Backward, with xh = x * rstd and g = dy * w:
//   dx = rstd * (g - xh * mean(g * xh)),   dw = sum over rows of dy * xh.
torch::Tensor rmsnorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// The SwiGLU gate y = silu(a) * b for a, b [..., F] of one shape, with s = sigmoid(a):
//   da = dy * b * s * (1 + a (1 - s)),   db = dy * a * s.
torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b);

// q, k and v out of a fused QKV projection qkv [..., (H + 2K) D]: {rot(q) [..., H, D],
// rot(k) [..., K, D], v [..., K, D]}, each contiguous, with rot the rotate-half rotary of
// fused_ops.h (cos, sin [..., D/2] with qkv's leading dims). The backward rotates dq and dk back
// and writes them with dv into one tensor of qkv's shape.
std::vector<torch::Tensor> qkv_rotary(const torch::Tensor& qkv, int64_t H, int64_t K, const torch::Tensor& cos,
                                      const torch::Tensor& sin);

}  // namespace loom::cpu
