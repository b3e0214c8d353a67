// Fused CUDA kernels for the memory-bound pieces of an InternLM layer (trainer/kernels/cuda/*.cu), as
// autograd functions: RMSNorm, rotary embedding, the SwiGLU gate. Each computes what the model's
// unfused LibTorch code computes (fp32 arithmetic inside, one rounding to the output dtype) in one
// pass over the activations instead of several, and has a reference in plain LibTorch ops that it
// is tested against (tests/gpu/gpu_fused_test.cpp, tests/trainer/cpu_kernels_test.cpp); the
// references compute in fp32, or in float64 for float64 inputs.
//
// A fused kernel runs where fused_kernels_available() and the tensors qualify (CUDA, bf16 or
// fp32, contiguous-able, sizes noted below), and on CPU for fp32 tensors (cpu_fused_applies; the
// plain C++ kernels of trainer/kernels/cpu_kernels.h, in every build, for RMSNorm, the SwiGLU gate and the
// QKV split with rotary); otherwise each function runs its reference, so callers need no branch of
// their own.
#pragma once

#include <torch/torch.h>

namespace loom {

// Whether this build has loom's CUDA kernels (CMake LOOM_CUDA=ON).
bool fused_kernels_available();

// Whether t takes the CPU kernels (trainer/kernels/cpu_kernels.h): a CPU fp32 tensor.
bool cpu_fused_applies(const torch::Tensor& t);

// publish_fp8_amax (RMSNorm, SwiGLU, QKV rotary): where the CUDA kernel runs, it also measures
// the absolute maximum of each tensor it makes for an FP8 linear (the output; the SwiGLU
// backward's da and db; the QKV rotary backward's fused gradient) and publishes it for that linear
// (fp8_publish_amax, fp8_linear.h), which then skips its own pass over it. The results are the
// same bits either way.

// RMSNorm over the last dim C: weight * x / sqrt(mean(x^2) + eps), fp32 inside, result in x's
// dtype. Fused on CUDA when x and weight share a dtype (bf16 or fp32), C % 8 == 0 and C <= 12288;
// on CPU when both are fp32.
torch::Tensor fused_rmsnorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                            bool publish_fp8_amax = false);
torch::Tensor rmsnorm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// The residual stream around a decoder layer's norm, CUDA only (fused_residual_rmsnorm_applies:
// as fused_rmsnorm's CUDA kernel): returns {h, fused_rmsnorm(h)} with h = x + r rounded to x's
// dtype, or h = x itself when r is undefined. The backward adds h's gradient (the residual
// stream's) to the norm's input gradient inside the norm's kernel: autograd would launch an add
// of two [tokens, C] tensors per norm. The result differs from the unfused add by that one
// rounding fewer.
bool fused_residual_rmsnorm_applies(const torch::Tensor& x, const torch::Tensor& weight);
std::vector<torch::Tensor> fused_residual_rmsnorm(const torch::Tensor& x, const torch::Tensor& r,
                                                  const torch::Tensor& weight, double eps,
                                                  bool publish_fp8_amax = false);

// The MLP's gate silu(x w1^T) * (x w2^T) with both projections in one GEMM against [w1; w2]
// (CUDA, bf16 or fp32, x and the weights of one dtype: fused_gated_projection_applies). The
// backward makes x's gradient in one GEMM over both halves (no add of two) and both weights'
// in another (or, where they hold gradients already, each added in its GEMM: weight_grad.h). w1 and w2 [F, C] are read in place when w2's storage continues w1's (the model
// allocates them so), else copied into one tensor each call.
bool fused_gated_projection_applies(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2);
torch::Tensor fused_gated_projection(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2);

// Rotary embedding in the rotate-half layout for x [..., N, D] (N heads) and angle tables
// cos, sin [..., D/2] fp32 with x's leading dims (one row per token): for i < D/2,
//   y_i = x_i cos_i - x_{i+D/2} sin_i,   y_{i+D/2} = x_{i+D/2} cos_i + x_i sin_i.
torch::Tensor fused_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
torch::Tensor rotary_reference(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// q, k and v out of a fused QKV projection qkv [..., (H + 2K) D] (contiguous, CUDA, bf16 or fp32;
// or CPU fp32, any layout):
// returns {fused_rotary(q), fused_rotary(k), v}, each contiguous ([..., H, D], [..., K, D] x 2),
// with cos, sin [..., D/2] as fused_rotary's. Its backward writes the three gradients straight into
// one [..., (H + 2K) D] tensor; autograd's narrow-backward zero-fills a full-size tensor per slice
// and adds them up (8 ms of a 1b step on an H200). Callers check fused_qkv_rotary_applies first.
// publish_fp8_amax: the backward publishes that gradient's maximum (qkv comes from an FP8 linear).
bool fused_qkv_rotary_applies(const torch::Tensor& qkv);
std::vector<torch::Tensor> fused_qkv_rotary(const torch::Tensor& qkv, int64_t H, int64_t K, const torch::Tensor& cos,
                                            const torch::Tensor& sin, bool publish_fp8_amax = false);

// dst = src for tensors of one shape and dtype whose rows (index 0) each hold their elements
// contiguously, at any row stride. On CUDA for bf16 and fp32 through loom's 16-byte row copy
// kernel, a plain kernel launch: ATen's copy_ of device memory is a cudaMemcpyAsync, some of
// which held the host for up to 1.7 ms when issued per document on several streams (profile; the
// step time did not measurably change with this kernel). Elsewhere dst.copy_(src).
void copy_token_rows(const torch::Tensor& src, const torch::Tensor& dst);

// The SwiGLU gate silu(a) * b for a, b of one shape and dtype (w1 x and w2 x of the MLP). Fused on
// CUDA for bf16 and fp32, on CPU for fp32.
torch::Tensor fused_swiglu(const torch::Tensor& a, const torch::Tensor& b, bool publish_fp8_amax = false);
torch::Tensor swiglu_reference(const torch::Tensor& a, const torch::Tensor& b);

// Cross entropy of a chunk of bf16 logits [n, V] in one kernel: writes loss [n] and lse [n]
// (fp32), correct [n] (bool, argmax == label) and overwrites logits with
// grad_scale * d(loss)/d(logits) (softmax - target, target = 1 - eps at the label + eps / V; a zero
// row for labels == ignore_index). fused_cross_entropy_applies: CUDA, bf16, contiguous, V % 8 == 0.
bool fused_cross_entropy_applies(const torch::Tensor& logits);
void fused_cross_entropy_(torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index, double eps,
                          double grad_scale, torch::Tensor loss, torch::Tensor lse, torch::Tensor correct);

// out = x * scale, or out += x * scale (accumulate), for bf16 x and out of one shape (contiguous,
// CUDA) and an fp32 scalar tensor scale on their device, in one pass: fp32 arithmetic, one
// rounding (fused_scale_add_applies). Scaling a bf16 gradient by a factor that is no bf16 number
// otherwise takes a cast to fp32 and back.
bool fused_scale_add_applies(const torch::Tensor& out, const torch::Tensor& x, const torch::Tensor& scale);
void fused_scale_add_(torch::Tensor out, const torch::Tensor& x, const torch::Tensor& scale, bool accumulate);

// A linear's bias gradient from its output gradient dy [rows, N]: out [N] = (add: +=) the sum of
// dy's rows, in fp32 (float64 for float64), rounded into out once. On CUDA for bf16 (N % 8 == 0,
// contiguous) one deterministic column-sum kernel pair (column_sum.cu), the same bits every run;
// otherwise ATen's sum. ATen's bf16 sum rounds to bf16 before the add rounds again.
void fused_bias_grad(torch::Tensor out, const torch::Tensor& dy, bool add);

// torch::embedding(weight, ids). Its backward, on CUDA for a bf16 weight [V, C] (C % 8 == 0) that
// holds a gradient already (a later micro-batch: weight_grad.h's adds_into_grad), adds each id's
// rows of the output gradient into that gradient (embedding_grad.cu: ids sorted stably, a token's
// rows summed in fp32 in order, one rounding; deterministic) and returns none; autograd's dense
// backward made a [V, C] gradient for AccumulateGrad to add, three passes over [V, C] where a
// micro-batch touches at most its token count of rows. Otherwise that dense backward.
torch::Tensor fused_embedding(const torch::Tensor& weight, const torch::Tensor& ids);

}  // namespace loom
