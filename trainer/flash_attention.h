// Flash attention over packed documents (issue 6): the variable-length kernel that LibTorch 2.x
// ships (at::_flash_attention_forward / _backward, FlashAttention-2) wrapped in an autograd
// function. The tokens of a micro-batch are one flat sequence cut into segments by cu_seqlens;
// every segment is causal on its own, so attention never crosses a document and no mask exists.
//
// Where the kernel is absent (LibTorch 1.13, CPU, fp32 activations, a head dim it lacks) the model
// runs cpu_attention.h's segment kernel (CPU fp32) or attention.h's masked path (anything else);
// select_attention() logs one line saying which kernel runs.
// Shapes: Tok = B*T flattened tokens, H query heads, K kv heads (GQA: H a multiple of K), D head dim.
#pragma once

#include <string>

#include <torch/torch.h>

namespace loom {

enum class AttentionKernel {
  kFlashVarlen,  // FlashAttention-2 varlen, CUDA, bf16/fp16
  kCpuSegments,  // cpu_attention.h: per document and query block, CPU, fp32
  kMasked,       // attention.h's math path with the block-diagonal causal mask
};
const char* attention_kernel_name(AttentionKernel kernel);

// job.attention: "auto" (the fastest kernel that runs here), or one kernel by name: "flash",
// "segments", "masked". Unknown names throw loom::Error.
enum class AttentionChoice { kAuto, kFlash, kSegments, kMasked };
AttentionChoice parse_attention_kernel(const std::string& name);

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

// Chooses the attention kernel for a run and installs it (attention.h's set_varlen_attention).
// kAuto: flash varlen where supported, else segment attention on CPU fp32, else the masked path.
// A named kernel that cannot run here is an error that says why. Logs which one runs and why. Call
// once, before training.
AttentionKernel select_attention(const torch::Device& device, torch::Dtype dtype, int64_t head_dim,
                                 AttentionChoice choice = AttentionChoice::kAuto);

}  // namespace loom
