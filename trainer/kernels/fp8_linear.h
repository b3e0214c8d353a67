// A linear layer y = x W^T + b whose three matmuls run in FP8 on the tensor cores (Hopper, Ada):
//   forward   y  = q4(x) q4(W)^T          e4m3 x e4m3, fast accumulation
//   backward  dx = q5(dy) q4(W)           e5m2 x e4m3
//             dW = q5(dy)^T q4(x)         e5m2 x e4m3, fp32 accumulation
//             db = sum over rows of dy    (bf16 dy, fp32 sum)
// q4/q5 quantize a bf16 tensor to e4m3 / e5m2 with one scale per tensor, computed on the device
// from the tensor's own absolute maximum at every call (dynamic scaling: no amax history, no host
// sync): scale = amax / format max, q = round_satfinite(x / scale). The GEMM (ATen's _scaled_mm,
// cuBLASLt) multiplies the scales back and returns bf16. Weights, their gradients and everything
// outside these matmuls stay bf16/fp32, so checkpoints do not depend on the precision.
//
// The forward saves the e4m3 copy of x (transposed, as dW's GEMM reads it: half the bytes of the
// bf16 x a plain linear saves) and W's transposed e4m3 copy, written by the same pass as the one
// the forward reads (1 byte per weight until the backward, where quantizing W again would read its
// bf16 bytes twice: its maximum, then its values), so both passes use one scale.
//
// Over a step's micro-batches: dW is added into W's gradient inside its GEMM (cuBLASLt with
// beta 1, weight_grad.h) from the second micro-batch on; and with cache_weight W's two e4m3
// copies are kept (2 bytes a weight) and reused by every forward until W changes, which its
// optimizer says by republishing W's maximum (fp8_publish_amax), so W is quantized once a step.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

namespace loom {

// Whether this build and `device` run FP8 linears: a CUDA build against LibTorch 2.x and a GPU of
// compute capability 8.9 or higher. When not, *why says which is missing.
bool fp8_supported(const torch::Device& device, std::string* why = nullptr);

// Whether fp8_linear takes x [..., K] and weight [N, K]: an FP8 build, CUDA, both bf16, and K, N
// and the row count of x multiples of 16 (the FP8 GEMM's alignment).
bool fp8_linear_applies(const torch::Tensor& x, const torch::Tensor& weight);

// The layer above; bias [N] bf16 or undefined. Differentiable in x, weight and bias. cache_weight:
// only a weight whose maximum is published is cached (an optimizer's; another is quantized at
// every call, as without).
torch::Tensor fp8_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                         bool cache_weight = false);

// {x W1^T, x W2^T}: two bias-free FP8 linears of one input, equal to two fp8_linear calls, with
// x quantized and saved once (the MLP's w1 and w2). Both weights must satisfy fp8_linear_applies.
std::vector<torch::Tensor> fp8_linear_pair(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2,
                                           bool cache_weights = false);

// A tensor's absolute maximum, measured by whoever wrote it in the same pass (the optimizer for
// a weight; RMSNorm, the SwiGLU gate and the QKV rotary backward for the activations and
// gradients they make), so that fp8_linear, quantizing that tensor as its input, weight or output
// gradient, skips its own pass over it: a third of the bytes quantizing moves. fp8_linear uses it
// while the tensor is alive and its version counter, which every in-place ATen op bumps, reads as
// at publication; a write that bypasses ATen (a collective into a weight's storage) must forget
// it (and any cached copies of it: cache_weight). amax: an fp32 scalar on the tensor's device, holding the value before any kernel queued
// after this call on the current stream reads it (or after an event that stream waits on). The
// registry holds neither tensor alive past its last user. Thread-safe host-side bookkeeping.
void fp8_publish_amax(const torch::Tensor& t, const torch::Tensor& amax);
void fp8_forget_amax(const torch::Tensor& t);
// The published maximum fp8_linear would use for t now, or an undefined tensor.
torch::Tensor fp8_published_amax(const torch::Tensor& t);

// x [rows, cols] bf16 quantized as fp8_linear does (e4m3, or e5m2 for gradients) and multiplied
// back, in fp32: what the GEMM sees of x. For tests.
torch::Tensor fp8_round_trip(const torch::Tensor& x, bool e5m2);

}  // namespace loom
