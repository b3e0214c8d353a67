#include "attention_select.h"

#include "attention.h"
#include "cpu_attention.h"
#include "flash_attention.h"
#include "loom/error.h"
#include "loom/log.h"

namespace loom {

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kFlashVarlen: return "flash attention varlen (FlashAttention-2, no mask)";
    case AttentionKernel::kCpuSegments: return "segment attention (CPU, per document and query block, no mask)";
    case AttentionKernel::kMasked: break;
  }
  return "masked math attention (dense block-diagonal causal mask)";
}

AttentionChoice parse_attention_kernel(const std::string& name) {
  if (name == "auto") return AttentionChoice::kAuto;
  if (name == "flash") return AttentionChoice::kFlash;
  if (name == "segments") return AttentionChoice::kSegments;
  if (name == "masked") return AttentionChoice::kMasked;
  LOOM_FAIL("job.attention='", name, "': expected auto, flash, segments or masked");
}

AttentionKernel select_attention(const torch::Device& device, torch::Dtype dtype, int64_t head_dim,
                                 AttentionChoice choice) {
  std::string why;
  const bool want_flash = choice == AttentionChoice::kAuto || choice == AttentionChoice::kFlash;
  if (want_flash && flash_attention_supported(device, dtype, head_dim, &why)) {
    set_varlen_attention(flash_varlen_attention);
    log::info("attention: ", attention_kernel_name(AttentionKernel::kFlashVarlen));
    return AttentionKernel::kFlashVarlen;
  }
  LOOM_CHECK(choice != AttentionChoice::kFlash, "job.attention=flash cannot run here: ", why);
  const bool segments_here = cpu_segment_attention_supported(device, dtype);
  LOOM_CHECK(choice != AttentionChoice::kSegments || segments_here, "job.attention=segments runs on CPU float32, "
             "this run is ", device.str(), " ", c10::toString(dtype));
  if (choice != AttentionChoice::kMasked && segments_here) {
    set_varlen_attention(cpu_segment_attention);
    log::info("attention: ", attention_kernel_name(AttentionKernel::kCpuSegments));
    return AttentionKernel::kCpuSegments;
  }
  set_varlen_attention({});
  log::info("attention: ", attention_kernel_name(AttentionKernel::kMasked),
            choice == AttentionChoice::kMasked ? std::string(" (job.attention=masked)") : " (no flash: " + why + ")");
  return AttentionKernel::kMasked;
}

}  // namespace loom
