// Packed causal attention on CPU, computed document by document: the CPU counterpart of
// flash_attention.h's varlen kernel, made by attention_select.h's make_attention_kernel and held by the model.
//
// The masked math path scores every query against all T keys of its row and then masks out the
// other documents and the future: B H T T scores, softmax over all of them, both again in backward.
// Here each segment s = tokens [cu[s], cu[s+1]) is cut into query blocks of kQueryBlock tokens,
// and a block only meets the keys of its own segment up to its last query. For one document per
// row that is ~(1/2 + kQueryBlock/2n) of the dense work; for many short documents far less. Each
// (segment, kv head) pair is one task of at::parallel_for; a block is a few one-thread BLAS sgemm
// calls with the G = H/K query heads of the kv head stacked as rows, so GQA needs no repeated k/v.
//
// fp32, CPU. The probabilities of each block are kept for backward (their total is the documents'
// causal triangles: less than the masked path keeps). Deterministic: a fixed order of blocks.
// Shapes: Tok = B*T flattened tokens, H query heads, K kv heads, D head dim, n segment length.
#pragma once

#include <torch/torch.h>

namespace loom {

// Query tokens per block: a block's scores are [K, kQueryBlock*G, keys].
inline constexpr int64_t kQueryBlock = 64;

// q [Tok, H, D], k/v [Tok, K, D] fp32 CPU, cu_seqlens [S+1] int32 with cu[0] = 0 and cu[S] = Tok,
// causal within every segment, softmax scale `scale`. Returns [Tok, H, D]; differentiable in q, k, v.
torch::Tensor cpu_segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& cu_seqlens, int64_t max_seqlen, double scale);

// Whether cpu_segment_attention runs for activations of this device and dtype (CPU, float32).
bool cpu_segment_attention_supported(const torch::Device& device, torch::Dtype dtype);

}  // namespace loom
