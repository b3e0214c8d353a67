// Per-document causal attention through cuDNN's fused flash attention: every document of a
// micro-batch in one call, forward and backward, read and written in place in the packed rows
// (kernels/cuda/cudnn_sdpa.h: loom's own cuDNN graphs, the rows taken as cuDNN's ragged layout).
//
// Why: on Hopper cuDNN's SDPA runs causal attention 1.35-1.75x faster than the FlashAttention-2
// kernel LibTorch ships (bench/RESULTS.md). LibTorch 2.11 reaches it only through entries that
// allocate their own outputs, so calling it per document cost a launch per document and a copy of
// every row into place, and through a ragged entry whose query gradients are wrong and which builds
// a graph on every call.
//
// A graph fixes how many documents a call holds and how long the longest may be; a call rounds both
// up to powers of two (the longest from kCudnnMinSeq), so a run meets few shapes. Graphs are built
// per thread, as cuDNN's handles are: the forward on the caller's thread, the backward (and a
// recomputed forward) on the autograd engine's. A shape met for the first time is built then (tens
// to hundreds of milliseconds, logged); warm_cudnn_attention builds the shapes of packs of one
// document before the first step.
//
// Shapes: Tok = B*T flattened tokens, H query heads, K kv heads (H a multiple of K), D head dim.
#pragma once

#include <string>

#include <torch/torch.h>

namespace loom {

// Head dims the kernel takes: multiples of 8 up to this.
inline constexpr int64_t kCudnnMaxHeadDim = 128;
// The shortest longest-document a graph is built for.
inline constexpr int64_t kCudnnMinSeq = 128;

// q [Tok, H, D], k/v [Tok, K, D] bf16/fp16 on CUDA; cu_seqlens_host [S+1] int32 on the CPU (document
// s = tokens [cu[s], cu[s+1]), cu[0] = 0, cu[S] = Tok); scale = softmax scale. Returns [Tok, H, D];
// differentiable in q, k and v. Throws loom::Error where the kernel is absent.
torch::Tensor cudnn_segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens_host, double scale);

// Whether cudnn_segment_attention runs for activations of this device, dtype and head dim: the
// build, cuDNN and the GPU answer by running it once on a tiny input. When not, *why says the reason.
bool cudnn_attention_supported(const torch::Device& device, torch::Dtype dtype, int64_t head_dim,
                               std::string* why = nullptr);

// Whether the device is Hopper (compute capability 9.x), where this kernel was measured faster than
// FlashAttention-2 per document (bench/RESULTS.md): AttentionCaps::hopper, read by the one rule.
bool cudnn_attention_preferred(const torch::Device& device);

// Builds the graphs a micro-batch of `documents` documents of seq_len tokens each meets (packs of
// one document), forward on the calling thread and backward on the autograd engine's (with
// recompute, the forward there too), so no step pays for them.
void warm_cudnn_attention(const torch::Device& device, torch::Dtype dtype, int64_t heads, int64_t kv_heads,
                             int64_t head_dim, int64_t seq_len, int64_t documents, bool recompute);

}  // namespace loom
