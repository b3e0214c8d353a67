// Launchers of loom's CUDA kernels (kernels/cuda/*.cu), called by the autograd wrappers of
// kernels/fused_ops.cpp and by optim/fused_adamw.cpp. Plain pointers and a stream, no LibTorch types, so
// the .cu files compile with nvcc alone. Every tensor is contiguous, row-major, on the current
// device; "bf16" = __nv_bfloat16 storage. Each launcher returns cudaGetErrorString of the launch
// (nullptr on success) so the caller reports it through LOOM_CHECK.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::cuda {

enum class Dtype { kFloat32, kBFloat16 };

// The optional `amax` outputs below (fp32 scalars, nullptr: none) receive the largest |value| of
// an output as stored (after rounding), as fp8_amax_bf16 would measure it: the launcher zeroes
// them first, on the stream. The FP8 linear an output feeds then skips its own pass over it.

// RMSNorm over rows of C: y = w * x / sqrt(mean(x^2) + eps), fp32 arithmetic, one rounding.
// x, y [rows, C] and w [C] of dtype; rstd [rows] fp32 (saved for backward). C % 8 == 0, C <= 8192.
// r (optional, [rows, C]): the residual add is fused in: h = x + r is rounded to dtype, stored
// into h [rows, C] and normalized in place of x (the backward's x is then h).
const char* rmsnorm_forward(Dtype dtype, const void* x, const void* r, const void* w, void* y, void* h, float* rstd,
                            int64_t rows, int64_t C, float eps, float* amax, void* stream);
// dx [rows, C] (dtype) and dw_partial [blocks, C] fp32 (summed over blocks by the caller);
// blocks = rmsnorm_backward_blocks(rows). dres (optional, [rows, C]): the residual stream's
// gradient, added to dx before its one rounding.
int64_t rmsnorm_backward_blocks(int64_t rows);
const char* rmsnorm_backward(Dtype dtype, const void* dy, const void* x, const void* w, const float* rstd,
                             const void* dres, void* dx, float* dw_partial, int64_t rows, int64_t C, void* stream);

// Rotary embedding, rotate-half layout: for i < D/2, with c = cos[t, i], s = sin[t, i]:
//   y[t, h, i] = x[t, h, i] c - x[t, h, i + D/2] s,  y[t, h, i + D/2] = x[t, h, i + D/2] c + x[t, h, i] s.
// x [tokens, heads, D] (dtype) with token t at x + t * x_token_stride (heads contiguous inside,
// so q and k can be read straight out of the fused QKV projection), y likewise with
// y_token_stride (heads * D: contiguous; the backward writes into the fused QKV gradient),
// cos/sin [tokens, D/2] fp32. inverse = true rotates by -angle (the backward). D even.
// rotary and copy_rows fold the largest |y| into *amax (optional) without zeroing it first: the
// pieces of one fused QKV gradient share a maximum.
const char* rotary(Dtype dtype, const void* x, int64_t x_token_stride, const float* cos, const float* sin, void* y,
                   int64_t y_token_stride, int64_t tokens, int64_t heads, int64_t D, bool inverse, float* amax,
                   void* stream);
// y[t, :width] = x[t, :width] for t < tokens, rows at the token strides (elements) as in rotary:
// v out of the fused QKV projection and its gradient back, 16 bytes a load where the layout
// allows (ATen's copy of a strided view moved about 1.5 TB/s on the H200).
const char* copy_rows(Dtype dtype, const void* x, int64_t x_token_stride, void* y, int64_t y_token_stride,
                      int64_t tokens, int64_t width, float* amax, void* stream);

// AdamW (ATen's fused AdamW math, fp32) over fp32 weights p and moments m, v with bf16 gradients
// g, read as they are and multiplied by grad_scale; out (optional, bf16) receives the updated
// weight rounded to bf16, and amax (optional, with out; an fp32 scalar) the largest |out|, as
// FP8 quantization of out would measure it (the launch zeroes it first; a skipped update leaves it
// as it was, as it leaves out). step and found_inf are fp32 scalars on the device (found_inf
// optional: non-zero skips the update). Up to kAdamWMaxTensors tensors per launch.
inline constexpr int kAdamWMaxTensors = 32;
struct AdamWTensor {
  float* p;
  float* m;
  float* v;
  const void* g;
  void* out;
  float* amax;
  int64_t n;
};
const char* adamw_bf16_grads(const AdamWTensor* tensors, int64_t count, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float grad_scale, const float* step, const float* found_inf,
                             void* stream);

// Sum of squares over count bf16 tensors (sizes[k] elements at tensors[k]) into the fp32 scalar
// *out, fp32 within a block's chunk and fp64 across chunks, in an order fixed by the sizes alone
// (the same bits every run). partials: sum_squares_partials(sizes, count) fp32 of scratch.
inline constexpr int kSumSquaresMaxTensors = 64;
int64_t sum_squares_partials(const int64_t* sizes, int64_t count);
const char* sum_squares_bf16(const void* const* tensors, const int64_t* sizes, int64_t count, float* partials,
                             float* out, void* stream);

// SwiGLU gate: y = silu(a) * b over [rows, width]; backward da = dy * b * silu'(a), db = dy * silu(a).
// y and dy are contiguous [rows, width]; a and b rows lie ab_stride elements apart, da and db
// rows dab_stride apart: the two halves of one [rows, 2 width] projection and its gradient
// (b = a + width, stride 2 width), or contiguous tensors (rows 1, stride = width).
const char* swiglu_forward(Dtype dtype, const void* a, const void* b, int64_t ab_stride, void* y, int64_t rows,
                           int64_t width, float* amax_y, void* stream);
const char* swiglu_backward(Dtype dtype, const void* dy, const void* a, const void* b, int64_t ab_stride, void* da,
                            void* db, int64_t dab_stride, int64_t rows, int64_t width, float* amax_da, float* amax_db,
                            void* stream);

// Cross entropy of one chunk of bf16 logits [rows, V] (V % 8 == 0) with labels [rows] int64
// (ignore_index: no loss, zero gradient), label smoothing eps: writes loss [rows], lse [rows]
// (fp32), correct [rows] (argmax == label), and overwrites the logits in place with
// grad_scale * d(loss)/d(logits) in bf16.
const char* cross_entropy_bf16(void* logits, int64_t rows, int64_t V, const int64_t* labels, int64_t ignore_index,
                               float eps, float grad_scale, float* loss, float* lse, bool* correct, void* stream);

// out = x * *scale (accumulate false) or out += x * *scale over n bf16 elements, fp32 arithmetic
// and one rounding per element; scale an fp32 scalar on the device.
const char* scale_add_bf16(const void* x, const float* scale, void* out, int64_t n, bool accumulate, void* stream);

// The embedding's gradient added into grad [V, C] bf16 (embedding_grad.cu): for each distinct id
// among the n ids, grad[id] += the sum of dy's rows [n, C] bf16 with that id, summed in fp32 in
// ascending row order and rounded once. sorted_ids [n] ascending and order [n] (the row of dy
// each came from, ascending within an id: a stable sort's permutation), int64 on the device.
// C % 8 == 0; dy and grad 16-byte aligned.
const char* embedding_grad_add_bf16(const int64_t* sorted_ids, const int64_t* order, const void* dy, void* grad,
                                    int64_t n, int64_t C, void* stream);

// A linear's bias gradient (column_sum.cu): out [N] bf16 = (or, add: +=) the column sums of dy
// [rows, N] bf16, summed in fp32 over fixed chunks of rows and then over the chunks in order, and
// rounded once: the same bits from the same dy. partial: column_sum_partials(rows, N) fp32 of
// scratch, 16-byte aligned (the caching allocator's are). N % 8 == 0; dy 16-byte aligned.
int64_t column_sum_partials(int64_t rows, int64_t N);
const char* column_sum_bf16(const void* dy, int64_t rows, int64_t N, float* partial, void* out, bool add,
                            void* stream);

// FP8 (sm_89+: Ada and Hopper). Formats: e4m3 (max 448) for weights and activations, e5m2
// (max 57344) for gradients. fp8_amax_bf16: max |x| over n bf16 elements (n % 8 == 0) into the
// device scalar *amax (zeroed first, on the stream). fp8_quantize_bf16: with scale = *amax /
// format max (1 when *amax is 0), writes q = round_satfinite(x / scale) as the row-major [rows,
// cols] out and/or the transposed [cols, rows] out_t (either may be null), and scale into
// *scale_out, for the GEMM to multiply back. x 16-byte aligned. rows and cols multiples of 16.
enum class Fp8Format { kE4M3, kE5M2 };
inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;
const char* fp8_amax_bf16(const void* x, int64_t n, float* amax, void* stream);
const char* fp8_quantize_bf16(const void* x, int64_t rows, int64_t cols, const float* amax, Fp8Format format,
                              void* out, void* out_t, float* scale_out, void* stream);

// An FP8 linear's weight gradient (fp8_gemm.cpp): dw [out, in] bf16 = (*scale_dy * *scale_x)
// dy_t x_t^T from the e5m2 dy_t [out, N] and the e4m3 x_t [in, N] (row-major, as fp8_linear
// keeps them), fp32 accumulation (no fast accumulation), one rounding to bf16 per output, in one
// cuBLASLt GEMM. accumulate: dw += that product instead, inside the GEMM (beta 1: the sum is
// rounded once). workspace: kFp8GemmWorkspaceBytes of device memory no other work uses until this
// call's work on the stream is done. The result:
//   kDone         dw is written (on the stream);
//   kUnsupported  nothing was written: a size is 0 or not a multiple of 16, a pointer is not
//                 16-byte aligned, cuBLASLt has no kernel for the case, or the process has no
//                 libcublasLt; the caller computes dw another way;
//   kFailed       a cuBLASLt or CUDA call failed; `error` says which and how (valid until the
//                 calling thread's next failure).
inline constexpr size_t kFp8GemmWorkspaceBytes = size_t{32} << 20;  // cuBLAS's advice for Hopper
enum class GemmStatus { kDone, kUnsupported, kFailed };
struct GemmResult {
  GemmStatus status;
  const char* error;  // kFailed only
};
GemmResult fp8_weight_grad(const void* dy_t, const void* x_t, const float* scale_dy, const float* scale_x, int64_t N,
                           int64_t in, int64_t out, void* dw, bool accumulate, void* workspace, size_t workspace_bytes,
                           void* stream);

}  // namespace loom::cuda
