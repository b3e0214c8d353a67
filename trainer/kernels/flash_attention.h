// Flash attention over packed documents: the variable-length kernel that LibTorch 2.x
// ships (at::_flash_attention_forward / _backward, FlashAttention-2) wrapped in an autograd
// function. The tokens of a micro-batch are one flat sequence cut into segments by cu_seqlens;
// every segment is causal on its own, so attention never crosses a document and no mask exists.
//
// Where the kernel is absent (LibTorch 1.13, CPU, fp32 activations, a head dim it lacks) the model
// runs another kernel (attention_select.h chooses).
// Shapes: Tok = B*T flattened tokens, H query heads, K kv heads (GQA: H a multiple of K), D head dim.
#pragma once

#include <string>

#include <torch/torch.h>

namespace loom {

// Head dims the kernel takes: multiples of 8 up to this.
inline constexpr int64_t kFlashMaxHeadDim = 256;

// q [Tok, H, D], k/v [Tok, K, D] bf16/fp16 on CUDA, cu_seqlens [S+1] int32 on the same device
// (segment s = tokens [cu[s], cu[s+1])), max_seqlen = longest segment, scale = softmax scale.
// Returns [Tok, H, D]; differentiable in q, k and v. Throws loom::Error where the kernel is absent.
torch::Tensor flash_varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& cu_seqlens, int64_t max_seqlen, double scale);

// Whether flash_varlen_attention runs for activations of this device, dtype and head dim: checked
// by running it once on a tiny input (so also a LibTorch built without flash attention, or a GPU
// older than sm80, answers no). When not, *why says the reason.
bool flash_attention_supported(const torch::Device& device, torch::Dtype dtype, int64_t head_dim,
                               std::string* why = nullptr);

}  // namespace loom
