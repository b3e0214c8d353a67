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
    case AttentionKernel::kCudnnSegments:
      return "cuDNN fused attention over a micro-batch's documents in one call, short ones sharing windows in "
             "a second (no mask)";
    case AttentionKernel::kFlashVarlen: return "flash attention varlen (FlashAttention-2, no mask)";
    case AttentionKernel::kCpuSegments: return "segment attention (CPU, per document and query block, no mask)";
    case AttentionKernel::kMasked: break;
  }
  return "masked math attention (dense block-diagonal causal mask)";
}

const char* attention_kernel_key(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kCudnnSegments: return "cudnn";
    case AttentionKernel::kFlashVarlen: return "flash";
    case AttentionKernel::kCpuSegments: return "segments";
    case AttentionKernel::kMasked: break;
  }
  return "masked";
}

AttentionChoice parse_attention_kernel(const std::string& name) {
  if (name == "auto") return AttentionChoice::kAuto;
  if (name == "cudnn") return AttentionChoice::kCudnn;
  if (name == "flash") return AttentionChoice::kFlash;
  if (name == "segments") return AttentionChoice::kSegments;
  if (name == "masked") return AttentionChoice::kMasked;
  LOOM_FAIL("job.attention='", name, "': expected auto, cudnn, flash, segments or masked");
}

AttentionCaps probe_attention_caps(const torch::Device& device, int64_t head_dim) {
  AttentionCaps caps;
  caps.cuda = device.is_cuda();
  caps.source = "probed on " + device.str();
  caps.cpu_segments = cpu_segment_attention_supported(torch::kCPU, torch::kFloat32);
  if (!caps.cuda) {
    caps.why_no_flash = caps.why_no_cudnn = "the device is " + device.str() + ", not CUDA";
    return caps;
  }
  // Presence is a fact of the build, cuDNN and the GPU, probed in bf16 at a head dim both take; the
  // run's own dtype and head dim are the rule's to check.
  const int64_t probe_dim = head_dim % 8 == 0 && head_dim <= kCudnnMaxHeadDim ? head_dim : 64;
  caps.flash = flash_attention_supported(device, torch::kBFloat16, probe_dim, &caps.why_no_flash);
  caps.cudnn = cudnn_attention_supported(device, torch::kBFloat16, probe_dim, &caps.why_no_cudnn);
  caps.hopper = cudnn_attention_preferred(device);
  return caps;
}

AttentionCaps assumed_attention_caps(bool cuda) {
  AttentionCaps caps;
  caps.cuda = cuda;
  caps.flash = cuda;
  caps.cpu_segments = cpu_segment_attention_supported(torch::kCPU, torch::kFloat32);
  caps.why_no_cudnn = "no GPU visible to ask";
  caps.why_no_flash = cuda ? "" : "not CUDA";
  caps.source = cuda ? "assumed: no GPU visible here; flash assumed (on Hopper a run takes cudnn, whose plan adds "
                       "its dQ accumulator and windows' bias)"
                     : "assumed: CPU";
  return caps;
}

AttentionPlan choose_attention(const AttentionCaps& caps, torch::Dtype dtype, int64_t head_dim,
                               AttentionChoice choice, bool deterministic) {
  const bool half = dtype == torch::kBFloat16 || dtype == torch::kFloat16;
  const std::string dtype_text = c10::toString(dtype);
  std::string no_cudnn = caps.why_no_cudnn, no_flash = caps.why_no_flash;
  if (!half) no_cudnn = no_flash = "activations are " + dtype_text + ", the CUDA kernels take bf16 or fp16";
  const bool cudnn_dim = head_dim % 8 == 0 && head_dim <= kCudnnMaxHeadDim;
  const bool flash_dim = head_dim % 8 == 0 && head_dim <= kFlashMaxHeadDim;
  if (!cudnn_dim) no_cudnn = str("head dim ", head_dim, " is not a multiple of 8 up to ", kCudnnMaxHeadDim);
  if (!flash_dim) no_flash = str("head dim ", head_dim, " is not a multiple of 8 up to ", kFlashMaxHeadDim);
  if (deterministic) no_cudnn = "job.deterministic=true: cuDNN's attention backward is not deterministic";
  const bool cudnn = caps.cuda && caps.cudnn && half && cudnn_dim && !deterministic;
  const bool flash = caps.cuda && caps.flash && half && flash_dim;
  const bool segments = !caps.cuda && caps.cpu_segments && dtype == torch::kFloat32;
  switch (choice) {
    case AttentionChoice::kCudnn:
      LOOM_CHECK(cudnn, "job.attention=cudnn cannot run here: ", no_cudnn);
      return {AttentionKernel::kCudnnSegments, ""};
    case AttentionChoice::kFlash:
      LOOM_CHECK(flash, "job.attention=flash cannot run here: ", no_flash);
      return {AttentionKernel::kFlashVarlen, ""};
    case AttentionChoice::kSegments:
      LOOM_CHECK(segments, "job.attention=segments runs on CPU float32, this run is ", caps.cuda ? "CUDA" : "CPU", " ",
                 dtype_text);
      return {AttentionKernel::kCpuSegments, ""};
    case AttentionChoice::kMasked: return {AttentionKernel::kMasked, "(job.attention=masked)"};
    case AttentionChoice::kAuto: break;
  }
  if (cudnn && caps.hopper) return {AttentionKernel::kCudnnSegments, ""};
  if (flash) return {AttentionKernel::kFlashVarlen, caps.hopper || deterministic ? "(no cuDNN: " + no_cudnn + ")" : ""};
  if (segments) return {AttentionKernel::kCpuSegments, ""};
  return {AttentionKernel::kMasked, caps.cuda ? "(no flash: " + no_flash + ")" : ""};
}

namespace {

// cu_seqlens on the host, as cuDNN's layout is built there. A batch built on the device has no host
// copy: read it back (a wait, not an error).
torch::Tensor host_cu_seqlens(const torch::Tensor& cu, const torch::Tensor& cu_host) {
  return cu_host.defined() ? cu_host : cu.cpu();
}

// The graphs of every micro-batch the kernel meets: one sequence per document for up to tokens /
// kCudnnWindowMeanTokens documents, and windows.
void warm_cudnn(const torch::Device& device, torch::Dtype dtype, int64_t head_dim, const AttentionShape& shape) {
  if (shape.seq_len <= 0) return;
  const auto start = std::chrono::steady_clock::now();
  const int64_t tokens = std::max<int64_t>(shape.micro_bsz, 1) * shape.seq_len;
  const int64_t most =
      warm_cudnn_attention(device, dtype, shape.heads, shape.kv_heads, head_dim, shape.seq_len, tokens,
                           std::max<int64_t>(tokens / kCudnnWindowMeanTokens, 1), shape.recompute, kCudnnWindow);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  log::info("attention: cuDNN's graphs for whole packs, up to ", most, " documents a micro-batch and windows of ",
            kCudnnWindow, " tokens built in ", format_number(took.count(), 3), " s");
}

}  // namespace

VarlenAttentionFn make_attention_kernel(AttentionKernel kernel, const torch::Device& device, torch::Dtype dtype,
                                        int64_t head_dim, const AttentionShape& shape, std::shared_ptr<AttentionUse> use) {
  switch (kernel) {
    case AttentionKernel::kCudnnSegments:
      warm_cudnn(device, dtype, head_dim, shape);
      return [use, seq_len = shape.seq_len](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                            const torch::Tensor& cu, const torch::Tensor& cu_host, int64_t,
                                            double scale) {
        const torch::Tensor host = host_cu_seqlens(cu, cu_host);
        const int64_t documents = std::max<int64_t>(host.size(0) - 1, 1);
        // Whole packs (a document of seq_len tokens each; none crosses a pack) run the dense graph.
        const bool whole = documents * seq_len == q.size(0);
        const bool windows = q.size(0) < kCudnnWindowMeanTokens * documents && !whole;
        if (use) ++(windows ? use->windows : use->per_document);
        return cudnn_segment_attention(q, k, v, host, scale, seq_len, windows ? kCudnnWindow : 0);
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

}  // namespace loom
