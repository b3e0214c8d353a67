#include "attention_select.h"

#include <chrono>

#include "cpu_attention.h"
#include "cudnn_attention.h"
#include "flash_attention.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"

namespace loom {

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kCudnnSegments: return "cuDNN attention per document (fused SDPA, no mask)";
    case AttentionKernel::kFlashVarlen: return "flash attention varlen (FlashAttention-2, no mask)";
    case AttentionKernel::kCpuSegments: return "segment attention (CPU, per document and query block, no mask)";
    case AttentionKernel::kMasked: break;
  }
  return "masked math attention (dense block-diagonal causal mask)";
}

AttentionChoice parse_attention_kernel(const std::string& name) {
  if (name == "auto") return AttentionChoice::kAuto;
  if (name == "cudnn") return AttentionChoice::kCudnn;
  if (name == "flash") return AttentionChoice::kFlash;
  if (name == "segments") return AttentionChoice::kSegments;
  if (name == "masked") return AttentionChoice::kMasked;
  LOOM_FAIL("job.attention='", name, "': expected auto, cudnn, flash, segments or masked");
}

VarlenAttentionFn varlen_kernel_of(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kCudnnSegments:
      return [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& cu,
                const torch::Tensor& cu_host, int64_t, double scale) {
        // A batch built on the device has no host copy: read it back (a wait, not an error).
        return cudnn_segment_attention(q, k, v, cu_host.defined() ? cu_host : cu.cpu(), scale);
      };
    case AttentionKernel::kFlashVarlen:
      return [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& cu,
                const torch::Tensor&, int64_t max_seqlen, double scale) {
        return flash_varlen_attention(q, k, v, cu, max_seqlen, scale);
      };
    case AttentionKernel::kCpuSegments:
      return [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& cu,
                const torch::Tensor&, int64_t max_seqlen, double scale) {
        return cpu_segment_attention(q, k, v, cu, max_seqlen, scale);
      };
    case AttentionKernel::kMasked: break;
  }
  return {};
}

AttentionKernel select_attention(const torch::Device& device, torch::Dtype dtype, int64_t head_dim,
                                 AttentionChoice choice, const AttentionShape& shape) {
  const auto install = [](AttentionKernel kernel, const std::string& why) {
    set_varlen_attention(varlen_kernel_of(kernel));
    log::info("attention: ", attention_kernel_name(kernel), why);
    return kernel;
  };
  std::string why_not_cudnn, why;
  const bool cudnn_wanted = choice == AttentionChoice::kCudnn ||
                            (choice == AttentionChoice::kAuto && cudnn_attention_preferred(device));
  if (cudnn_wanted && cudnn_attention_supported(device, dtype, head_dim, &why_not_cudnn)) {
    if (shape.seq_len > 0) {
      const auto start = std::chrono::steady_clock::now();
      warm_cudnn_attention(device, dtype, shape.heads, shape.kv_heads, head_dim, shape.seq_len, shape.recompute);
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      log::info("attention: cuDNN's graphs for ", (shape.seq_len + kSegmentGrain - 1) / kSegmentGrain,
                " padded lengths built in ", format_number(took.count(), 3), " s (once per run)");
    }
    return install(AttentionKernel::kCudnnSegments, "");
  }
  LOOM_CHECK(choice != AttentionChoice::kCudnn, "job.attention=cudnn cannot run here: ", why_not_cudnn);
  const bool want_flash = choice == AttentionChoice::kAuto || choice == AttentionChoice::kFlash;
  if (want_flash && flash_attention_supported(device, dtype, head_dim, &why)) {
    return install(AttentionKernel::kFlashVarlen, why_not_cudnn.empty() ? "" : " (no cuDNN: " + why_not_cudnn + ")");
  }
  LOOM_CHECK(choice != AttentionChoice::kFlash, "job.attention=flash cannot run here: ", why);
  const bool segments_here = cpu_segment_attention_supported(device, dtype);
  LOOM_CHECK(choice != AttentionChoice::kSegments || segments_here, "job.attention=segments runs on CPU float32, "
             "this run is ", device.str(), " ", c10::toString(dtype));
  if (choice != AttentionChoice::kMasked && segments_here) return install(AttentionKernel::kCpuSegments, "");
  return install(AttentionKernel::kMasked, choice == AttentionChoice::kMasked ? std::string(" (job.attention=masked)")
                                                                              : " (no flash: " + why + ")");
}

}  // namespace loom
