// Which attention kernel a run uses (job.attention), chosen once at start and installed as
// attention.h's varlen kernel:
//   cudnn     cuDNN's SDPA once per document (kernels/cudnn_attention.h), CUDA bf16/fp16
//   flash     FlashAttention-2 varlen (kernels/flash_attention.h), CUDA bf16/fp16
//   segments  per-document segment attention (kernels/cpu_attention.h), CPU fp32
//   masked    attention.h's math path with the block-diagonal causal mask, anywhere
#pragma once

#include <string>

#include <torch/torch.h>

#include "attention.h"

namespace loom {

enum class AttentionKernel {
  kCudnnSegments,  // cuDNN SDPA per document, CUDA, bf16/fp16
  kFlashVarlen,    // FlashAttention-2 varlen, CUDA, bf16/fp16
  kCpuSegments,    // cpu_attention.h: per document and query block, CPU, fp32
  kMasked,         // attention.h's math path with the block-diagonal causal mask
};
const char* attention_kernel_name(AttentionKernel kernel);

// job.attention: "auto" (the fastest kernel that runs here), or one kernel by name: "cudnn",
// "flash", "segments", "masked". Unknown names throw loom::Error.
enum class AttentionChoice { kAuto, kCudnn, kFlash, kSegments, kMasked };
AttentionChoice parse_attention_kernel(const std::string& name);

// The varlen kernel function that set_varlen_attention() installs for a kernel (empty for kMasked).
VarlenAttentionFn varlen_kernel_of(AttentionKernel kernel);

// The heads and the longest segment of a run, and whether any layer's forward is recomputed in the
// backward: what a kernel that builds per-shape plans (cuDNN's graphs) prepares for before the
// first step. seq_len 0: prepare nothing.
struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, seq_len = 0;
  bool recompute = false;
};

// Chooses the attention kernel for a run and installs it (attention.h's set_varlen_attention).
// kAuto: cuDNN where it runs and is preferred (Hopper), else flash varlen where supported, else
// segment attention on CPU fp32, else the masked path. A named kernel that cannot run here is an
// error that says why. Logs which one runs and why. Call once, before training.
AttentionKernel select_attention(const torch::Device& device, torch::Dtype dtype, int64_t head_dim,
                                 AttentionChoice choice = AttentionChoice::kAuto, const AttentionShape& shape = {});

}  // namespace loom
