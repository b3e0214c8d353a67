// The one AdamW of loom (torch.optim.AdamW's update: decoupled weight decay, bias-corrected
// moments, eps added after the square root) over a group of tensors, in as few kernel launches as
// possible. The replicated optimizer (optimizer.h) calls it per parameter group; ZeRO (zero.h)
// on views of its flat fp32 shard. Both clip with clip_coefficient.
//
// On CUDA with LibTorch >= 2 this is ATen's fused multi-tensor kernel (at::_fused_adamw_): a few
// launches for the whole group, the step count and the skip flag read on the device, so the
// update never waits for the host. Elsewhere the same math runs with foreach ops (CPU tests).
#pragma once

#include <vector>

#include <torch/torch.h>

#include "optim_options.h"

namespace loom {

inline constexpr int64_t kCastBucketBytes = int64_t{1} << 30;

// What every AdamW implementation reads: [adam] and [hybrid_zero_optimizer] (optim_options.h,
// where their defaults are), assembled by TrainConfig::optimizer_options(). lr is the schedule's
// peak; each update's lr arrives in AdamWStepArgs.
struct OptimizerOptions : AdamOptions, HybridZeroOptions {
  // Both sections' checks: throws loom::Error naming the key of a value out of range.
  void validate() const;
};

// What changes from one adamw_step call to the next.
struct AdamWStepArgs {
  double lr = 1e-3;
  bool decay = true;        // this group takes OptimizerOptions::weight_decay (else none)
  double grad_scale = 1.0;  // every gradient is multiplied by this first, without touching grads
};

// The factor that clips gradients of global L2 norm `norm` to max_norm: max_norm / (norm + 1e-6)
// (InternLM's and torch's clip_grad_norm_) when that is below 1; 1 when max_norm <= 0 (no clipping).
double clip_coefficient(double max_norm, double norm);

// params: the weights updated in place (fp32 master weights when the model runs in bf16);
// grads: same shapes as params, any float dtype: gradients of another dtype (the bf16 model's) are
// cast bucket by bucket, so at most kCastBucketBytes of copies exist at once (casting all of a 7B
// model's gradients up front would take 28 GB); exp_avg, exp_avg_sq: the moments, as params.
// step: a float32 scalar tensor on the params' device holding this update's number (1 for the
// first): the caller advances it (step.add_(1)) before each call, on the device, without a sync.
// found_inf (optional, float32 scalar on the device): when it holds a non-zero value the update is
// skipped entirely (params and moments unchanged), again without a host sync on CUDA.
// low_precision (optional, one per param): receives each updated param in its own dtype (the bf16
// model's weights of fp32 masters), as low_precision[i].copy_(params[i]) would.
// amax (optional, one per param, each an fp32 scalar on the device or undefined): receives the
// largest |low_precision[i]| after the update, the scale an FP8 matmul of that weight needs
// (fp8_linear.h); the bf16 kernel finds it in its update pass, other paths with a reduction.
//
// On CUDA, fp32 params with bf16 grads (the bf16 model's) take loom's kernel (cuda/adamw.cu): the
// gradient is read as bf16, scaled, and the bf16 copy written in the same pass; no fp32 copies.
void adamw_step(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                const std::vector<torch::Tensor>& exp_avg, const std::vector<torch::Tensor>& exp_avg_sq,
                const torch::Tensor& step, const OptimizerOptions& options, const AdamWStepArgs& args,
                const torch::Tensor& found_inf = torch::Tensor(),
                const std::vector<torch::Tensor>& low_precision = {},
                const std::vector<torch::Tensor>& amax = {});

// sqrt(sum of squares) over every defined gradient, as an fp32 scalar on their device (read it back
// once), without fp32 copies of bf16 gradients: on CUDA, contiguous bf16 ones go through loom's
// deterministic sum-of-squares kernel (cuda/sum_squares.cu) and the rest through one multi-tensor
// norm launch per dtype; elsewhere one fp32-accumulating norm per tensor. Zero when no gradient is
// defined.
torch::Tensor global_grad_norm(const std::vector<torch::Tensor>& grads);

// Whether adamw_step takes the fused kernel for tensors on this device.
bool adamw_is_fused(const torch::Device& device);

}  // namespace loom
