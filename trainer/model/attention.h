// Packed attention: several documents share one row of a micro-batch, and a token attends only to
// earlier tokens of its own document (Batch::segments); position ids restart in every document
// (Batch::positions) and feed rotary embeddings.
//
// Two kinds of kernel compute the same thing:
//   - the math path (any device and dtype): softmax(q k^T / sqrt(D) + mask) v with a
//     block-diagonal causal mask [B, 1, 1, T, T] built from Batch::segments;
//   - a varlen kernel, held by the model and handed to every forward's PackedContext (the run's
//     choice is attention_select.h's: cuDNN or FlashAttention-2 on GPU, cpu_attention.h's segment
//     kernel on CPU fp32); it sees the flattened tokens and Batch::cu_seqlens, and no mask is built.
// Shapes follow core/batch.h: B T C H K D.
#pragma once

#include <functional>

#include <torch/torch.h>

#include "batch.h"

namespace loom {

// A varlen kernel: q [B*T, H, D], k/v [B*T, K, D] (rows of the micro-batch concatenated),
// cu_seqlens [S+1] int32 on their device and cu_seqlens_host on the CPU (undefined where the batch
// has none), max_seqlen, softmax scale, causal within each segment -> [B*T, H, D].
using VarlenAttentionFn =
    std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& cu_seqlens, const torch::Tensor& cu_seqlens_host,
                                int64_t max_seqlen, double scale)>;
// Everything attention needs from a Batch, computed once per forward and shared by every layer.
struct PackedContext {
  torch::Tensor cos, sin;     // [B, T, 1, D] rotary tables for Batch::positions (fp32)
  torch::Tensor mask;         // [B, 1, 1, T, T] bool: true where query i may attend key j
  torch::Tensor bias;         // the same as fp32: 0 where allowed, -inf elsewhere (added to the scores)
  torch::Tensor cu_seqlens;   // [S+1] int32, as Batch::cu_seqlens
  torch::Tensor cu_seqlens_host;  // the same on the CPU (undefined when the batch has no host copy)
  int64_t max_seqlen = 0;
  VarlenAttentionFn kernel;   // empty: the math path with mask/bias
};

// Rotary embedding tables, rotate-half layout (GPT-NeoX / HF LLaMA / flash-attn non-interleaved):
// inv_freq[i] = base^(-2i/D), angle[t, i] = positions[t] * inv_freq[i] for i < D/2, and the table
// repeats the D/2 angles twice so that rotate(x) = x * cos + rotate_half(x) * sin.
// With a kernel no mask is built (the [B, T, T] work and memory are skipped).
PackedContext make_packed_context(const Batch& batch, int64_t head_dim, double rope_base,
                                  VarlenAttentionFn kernel = {});

// x [B, T, N, D] rotated by ctx.cos/ctx.sin (computed in fp32, returned in x's dtype).
torch::Tensor apply_rotary(const torch::Tensor& x, const PackedContext& ctx);

// q [B, T, H, D], k and v [B, T, K, D] with H a multiple of K (query head h uses kv head h / (H/K),
// the grouping of HF's repeat_kv). Returns [B, T, H, D]. Scale 1/sqrt(D).
torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const PackedContext& ctx);

// The math path alone (what packed_attention runs when the context has no varlen kernel).
torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& mask);
// The same with the mask as an additive fp32 bias (mask_to_bias), built once per batch.
torch::Tensor biased_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& bias);
torch::Tensor mask_to_bias(const torch::Tensor& mask);

}  // namespace loom
