// Per-document causal attention through cuDNN's fused SDPA (the dense, cached-graph entry
// at::_cudnn_attention_forward / _backward), called once per segment on views of the packed rows.
//
// Why: on Hopper cuDNN's SDPA runs causal attention 1.35-1.75x faster than the FlashAttention-2 kernel
// LibTorch ships, but its variable-length entry is unusable through LibTorch 2.11 (wrong query
// gradients, a graph built on every call). Its dense entry caches one graph per shape, so each
// segment of n tokens is run as one causal sequence of P = n rounded up to kSegmentGrain tokens:
//   - forward: q, k, v of the segment are [1, H, P, D] views of the packed rows, no copy. The P - n
//     rows past the segment belong to the next one; causality keeps them out of the segment's own
//     n outputs, and their outputs are dropped.
//   - backward: the output gradient of the segment is zero-padded to P rows, so the rows past the
//     segment add nothing to its key and value gradients (their score gradients are zero); the
//     forward's output is read through the same views (only the first n rows meet a non-zero
//     gradient).
// A segment whose P rows run past the last token is zero-padded into a copy instead. P takes at most
// ceil(T / kSegmentGrain) values, so a run builds a bounded set of graphs; warm_cudnn_attention()
// builds them all before the first step. The segments run longest first on three streams, so short
// segments' small grids (heads x query tiles) share the SMs; each copies its rows into place.
// Back-to-back segments of exactly batch_len tokens (whole packs of one document each, batch_len =
// seq_len a multiple of kSegmentGrain) run as one call of batch B on [B, H, P, D] views; when that
// one call covers every token, its output and gradients are used as they come, with no rows to copy
// (a 1b step's profile: per-pack calls and their row copies cost ~8.5 ms of a 315 ms step against one
// batched call). Only that one length is batched, so the graphs stay the warmed set.
//
// Shapes: Tok = B*T flattened tokens, H query heads, K kv heads (H a multiple of K), D head dim.
#pragma once

#include <string>

#include <torch/torch.h>

namespace loom {

// Segments are padded to a multiple of this many tokens (the kernel's query/key tile).
inline constexpr int64_t kSegmentGrain = 128;
// Head dims the kernel takes: multiples of 8 up to this.
inline constexpr int64_t kCudnnMaxHeadDim = 128;

// q [Tok, H, D], k/v [Tok, K, D] bf16/fp16 on CUDA; cu_seqlens_host [S+1] int32 on the CPU (segment
// s = tokens [cu[s], cu[s+1]), cu[0] = 0, cu[S] = Tok); scale = softmax scale; batch_len: the
// segment length batched (a multiple of kSegmentGrain; 0 batches none). Returns [Tok, H, D];
// differentiable in q, k and v. Throws loom::Error where the kernel is absent.
torch::Tensor cudnn_segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens_host, double scale, int64_t batch_len = 0);

// Whether cudnn_segment_attention runs for activations of this device, dtype and head dim: the
// LibTorch build, cuDNN and the GPU answer by running it once on a tiny input. When not, *why says
// the reason.
bool cudnn_attention_supported(const torch::Device& device, torch::Dtype dtype, int64_t head_dim,
                               std::string* why = nullptr);

// Whether the device is Hopper (compute capability 9.x), where this kernel was measured faster than
// FlashAttention-2 per document (bench/RESULTS.md): AttentionCaps::hopper, read by the one rule.
bool cudnn_attention_preferred(const torch::Device& device);

// Builds the graphs of every padded length up to seq_len for these heads, and of batches of 2 to
// max_batch whole packs (batch_len = seq_len, a multiple of kSegmentGrain), so no step pays for one.
// cuDNN's graph caches are per thread: the forwards are built on the calling thread and the
// backwards on the autograd engine's thread of the device, which runs every backward; with
// recompute, the forwards again there, where checkpointed layers are recomputed.
void warm_cudnn_attention(const torch::Device& device, torch::Dtype dtype, int64_t heads, int64_t kv_heads,
                          int64_t head_dim, int64_t seq_len, int64_t max_batch, bool recompute);

}  // namespace loom
