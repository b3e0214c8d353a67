// One AdamW update (torch.optim.AdamW's: decoupled weight decay, bias-corrected moments, eps
// added after the square root) over a group of tensors, as few kernel launches as possible.
//
// On CUDA with LibTorch >= 2 this is ATen's fused multi-tensor kernel (at::_fused_adamw_): a few
// launches for the whole group, the step count and the skip flag read on the device, so the
// update never waits for the host. Elsewhere the same math runs with foreach ops (CPU tests).
#pragma once

#include <vector>

#include <torch/torch.h>

namespace loom {

inline constexpr int64_t kCastBucketBytes = int64_t{1} << 30;

struct AdamWStepOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // Every gradient is multiplied by this first (the clip coefficient), without touching grads.
  double grad_scale = 1.0;
};

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
//
// On CUDA, fp32 params with bf16 grads (the bf16 model's) take loom's kernel (cuda/adamw.cu): the
// gradient is read as bf16, scaled, and the bf16 copy written in the same pass; no fp32 copies.
void adamw_step(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                const std::vector<torch::Tensor>& exp_avg, const std::vector<torch::Tensor>& exp_avg_sq,
                const torch::Tensor& step, const AdamWStepOptions& options,
                const torch::Tensor& found_inf = torch::Tensor(),
                const std::vector<torch::Tensor>& low_precision = {});

// sqrt(sum of squares) over every defined gradient, as an fp32 scalar on their device (read it back
// once): one fp32-accumulating reduction per tensor (no fp32 copy of a bf16 gradient) and one over
// the per-tensor norms. Zero when no gradient is defined.
torch::Tensor global_grad_norm(const std::vector<torch::Tensor>& grads);

// Whether adamw_step takes the fused kernel for tensors on this device.
bool adamw_is_fused(const torch::Device& device);

}  // namespace loom
