// Per-document causal attention through cuDNN's fused flash attention: every document of a
// micro-batch in one call (two with windows, below), forward and backward, read and written in
// place in the packed rows (kernels/cuda/cudnn_sdpa.h: loom's own cuDNN graphs, the rows taken as
// cuDNN's ragged layout).
//
// Why: on Hopper cuDNN's SDPA runs causal attention 1.35-1.75x faster than the FlashAttention-2
// kernel LibTorch ships (bench/RESULTS.md). LibTorch 2.11 reaches it only through entries that
// allocate their own outputs, so calling it per document cost a launch per document and a copy of
// every row into place, and through a ragged entry whose query gradients are wrong and which builds
// a graph on every call.
//
// A graph fixes how many documents a call holds and how long the longest may be. A call rounds the
// count up to a power of two, and the longest up to a power of two from kCudnnMinSeq and at least
// max_seq (a run passes its seq_len: tiles past a document's end cost nothing measurable, bench/
// RESULTS.md), so a run meets one graph per power of two of documents (and with windows, per power
// of two of windows and of longer documents beside them). Graphs are built per thread,
// as cuDNN's handles are: the forward on the caller's thread, the backward (and a recomputed
// forward) on the autograd engine's. warm_cudnn_attention builds a run's before its first step; a
// shape met later is built then (logged).
//
// Documents of tens of tokens would each hold a 128-row tile: with `window`, those of up to that
// many tokens share windows kept apart by a bias, and the longer ones run in a second call
// (cuda/cudnn_sdpa.h, sdpa_windows). A thread reuses the layouts and bias of the documents it met
// last, so a micro-batch's are uploaded and built once for all its layers.
//
// Shapes: Tok = B*T flattened tokens, H query heads, K kv heads (H a multiple of K), D head dim.
#pragma once

#include <string>

#include <torch/torch.h>

namespace loom {

// Head dims the kernel takes: multiples of 8 up to this.
inline constexpr int64_t kCudnnMaxHeadDim = 128;
// A graph's longest document is at least this many tokens (the call's longest is rounded up to it).
inline constexpr int64_t kCudnnMinSeq = 128;

// The most windows `tokens` tokens split into (cuda/cudnn_sdpa.h, sdpa_windows), as the power of two
// a graph holds: a window was closed by a short document that did not fit, so two neighbours hold
// more than `window` tokens together, and each run of windows between longer documents (at most
// tokens / (window + 1) of them) adds one: 2 tokens / (window + 1) + 1 at most.
inline int64_t cudnn_most_windows(int64_t tokens, int64_t window) {
  int64_t n = 1;
  while (n < 2 * tokens / (window + 1) + 1) n *= 2;
  return n;
}

// q [Tok, H, D], k/v [Tok, K, D] bf16/fp16 on CUDA; cu_seqlens_host [S+1] int32 on the CPU (document
// s = tokens [cu[s], cu[s+1]), cu[0] = 0, cu[S] = Tok); scale = softmax scale; max_seq: the longest
// document the graph is built for at least (0: the call's own). window (0, or a power of two from
// kCudnnMinSeq): documents of up to that many tokens share windows kept apart by a bias, longer
// ones run in a second call (cuda/cudnn_sdpa.h, sdpa_windows). Returns [Tok, H, D]; differentiable
// in q, k and v. Throws loom::Error where the kernel is absent.
torch::Tensor cudnn_segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens_host, double scale, int64_t max_seq = 0,
                                      int64_t window = 0);

// Whether cudnn_segment_attention runs for activations of this device, dtype and head dim: the
// build, cuDNN and the GPU answer by running it once on a tiny input. When not, *why says the reason.
bool cudnn_attention_supported(const torch::Device& device, torch::Dtype dtype, int64_t head_dim,
                               std::string* why = nullptr);

// Whether the device is Hopper (compute capability 9.x), where this kernel was measured faster than
// FlashAttention-2 per document (bench/RESULTS.md): AttentionCaps::hopper, read by the one rule.
bool cudnn_attention_preferred(const torch::Device& device);

// Builds the graphs a run of micro-batches of `tokens` tokens meets, for max_seq = seq_len (as a run
// calls cudnn_segment_attention): whole packs (the dense graph of tokens / seq_len documents) and 2,
// 4, ... documents up to the power of two max_documents rounds up to; the forward on the calling
// thread and the backward on the autograd engine's (with recompute, the forward there too), so no
// step pays for them; with `window`, also every count of windows and of longer documents beside
// them a micro-batch can split into. Returns how many documents the largest holds.
int64_t warm_cudnn_attention(const torch::Device& device, torch::Dtype dtype, int64_t heads, int64_t kv_heads,
                             int64_t head_dim, int64_t seq_len, int64_t tokens, int64_t max_documents, bool recompute,
                             int64_t window = 0);

}  // namespace loom
