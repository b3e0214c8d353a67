// Which attention kernel a run uses (job.attention), decided by one pure rule (choose_attention)
// over what the device offers (AttentionCaps) and held by the model (InternLMImpl::set_attention).
// The rule runs more than once, on the same inputs: at start the loop calls it
// (Loop::plan_memory_and_attention) and so does the memory plan it makes (plan_inputs, through
// plan_for_run), and the loop asserts that the two agree; `loom-train plan` calls it through the
// same plan_inputs. So the plan, `loom-train plan` and the run name the same kernel:
//   cudnn        cuDNN's fused attention over every document of a micro-batch in one call
//                (kernels/cudnn_attention.h), CUDA bf16/fp16; a micro-batch whose documents average
//                under kCudnnWindowMeanTokens tokens has its short ones share windows. Auto's choice
//                on Hopper
//   flash        FlashAttention-2 varlen (kernels/flash_attention.h), CUDA bf16/fp16
//   segments     per-document segment attention (kernels/cpu_attention.h), CPU fp32
//   masked       attention.h's math path with the block-diagonal causal mask, anywhere
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "attention.h"

namespace loom {

enum class AttentionKernel {
  kCudnnSegments,  // cuDNN's fused attention over the micro-batch's documents, CUDA, bf16/fp16
  kFlashVarlen,    // FlashAttention-2 varlen, CUDA, bf16/fp16
  kCpuSegments,    // cpu_attention.h: per document and query block, CPU, fp32
  kMasked,         // attention.h's math path with the block-diagonal causal mask
};
const char* attention_kernel_name(AttentionKernel kernel);
// The short name job.attention takes for it.
const char* attention_kernel_key(AttentionKernel kernel);

// kCudnnSegments: a micro-batch whose documents average fewer tokens than this has its documents of
// up to kCudnnWindow tokens share windows of that many, kept apart by a bias, and its longer ones
// in a second call (cudnn_attention.h). One sequence per document costs a 128-row tile per
// document: at ~16-token documents the 1b shape's attention took 1.13x as long as on one-document
// packs, and windows of 256 took 0.40x of one sequence per document. The two cross between ~34
// and ~68 tokens a document (windows of 256 beside a second call: 0.72x at ~34, 1.07x at ~68;
// windows of 128 are no faster than 256), and on paragraphs (~56 a pack, 64-75 tokens a document)
// a 1b step ran at the same speed either way (bench/RESULTS.md).
inline constexpr int64_t kCudnnWindowMeanTokens = 64;
inline constexpr int64_t kCudnnWindow = 256;

// job.attention: "auto" (the fastest kernel that runs here), or one kernel by name: "cudnn",
// "flash", "segments", "masked". Unknown names throw loom::Error.
enum class AttentionChoice { kAuto, kCudnn, kFlash, kSegments, kMasked };
AttentionChoice parse_attention_kernel(const std::string& name);

// What a device offers the kernels: probed by running each on a tiny input (probe_attention_caps)
// or, where the device is not visible (`loom-train plan` on a machine without the GPU), assumed.
struct AttentionCaps {
  bool cuda = false;
  bool hopper = false;        // compute capability 9.x: cuDNN's SDPA measured faster there
  bool flash = false;         // FlashAttention-2 varlen ran
  bool cudnn = false;         // cuDNN's SDPA ran, forward and backward
  bool cpu_segments = false;  // the CPU segment kernel is built (BLAS)
  std::string why_no_flash, why_no_cudnn;
  std::string source;         // "probed on cuda:0" or "assumed: ..." (printed by the plan)
};
AttentionCaps probe_attention_caps(const torch::Device& device, int64_t head_dim);
// A CUDA device that is not visible: flash assumed present, cuDNN and Hopper not known.
AttentionCaps assumed_attention_caps(bool cuda);

struct AttentionPlan {
  AttentionKernel kernel = AttentionKernel::kMasked;
  std::string why;  // "" or a parenthesised reason ("(no cuDNN: ...)")
};

// The one rule. kAuto: on Hopper with cuDNN, cudnn; else
// flash where it runs; else segment attention on CPU fp32; else masked. Both kernels of CUDA take
// bf16/fp16 and head dims that are multiples of 8 (cuDNN up to 128, flash up to 256). A named
// kernel that cannot run here throws loom::Error saying why. `deterministic` (job.deterministic,
// determinism.h): never cuDNN, whose backward has no deterministic mode in LibTorch; auto takes
// flash there and a named cuDNN kernel is refused. No side effects.
AttentionPlan choose_attention(const AttentionCaps& caps, torch::Dtype dtype, int64_t head_dim,
                               AttentionChoice choice, bool deterministic = false);

// How many attention calls of kCudnnSegments ran one sequence per document, and how many shared
// windows (every layer, forward and recompute counted); the loop reads and resets it each step.
struct AttentionUse {
  std::atomic<int64_t> per_document{0}, windows{0};
};

// The heads and the longest segment of a run, and whether any layer's forward is recomputed in the
// backward: what a kernel that builds per-shape plans (cuDNN's graphs) prepares for before the
// first step. seq_len 0: prepare nothing.
struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, seq_len = 0;
  bool recompute = false;
  int64_t micro_bsz = 1;  // packs one call may hold
};

// The kernel function of a plan, ready to run: cuDNN's graphs are built for `shape` (logged), and
// kCudnnSegments counts its branches into `use` (may be null). Empty for kMasked.
VarlenAttentionFn make_attention_kernel(AttentionKernel kernel, const torch::Device& device, torch::Dtype dtype,
                                        int64_t head_dim, const AttentionShape& shape = {},
                                        std::shared_ptr<AttentionUse> use = nullptr);

}  // namespace loom
