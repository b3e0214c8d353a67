#include "fused_adamw.h"

#include <cmath>
#include <optional>

#include "loom/error.h"
#include "torch_compat.h"

namespace loom {

bool adamw_is_fused(const torch::Device& device) { return LOOM_TORCH2 && device.is_cuda(); }

namespace {

// One update over tensors whose grads already have the params' dtype.
void adamw_step_same_dtype(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                           const std::vector<torch::Tensor>& exp_avg, const std::vector<torch::Tensor>& exp_avg_sq,
                           const torch::Tensor& step, const AdamWStepOptions& o, const torch::Tensor& found_inf) {
#if LOOM_TORCH2
  if (adamw_is_fused(params.front().device())) {
    // The kernel reads one step tensor per parameter; they may all be the same tensor.
    const std::vector<torch::Tensor> steps(params.size(), step);
    std::optional<torch::Tensor> inf;
    if (found_inf.defined()) inf = found_inf;
    at::_fused_adamw_(params, grads, exp_avg, exp_avg_sq, /*max_exp_avg_sqs=*/{}, steps, o.lr, o.beta1, o.beta2,
                      o.weight_decay, o.eps, /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, inf);
    return;
  }
#endif
  // Reference path (CPU): reading step and found_inf back is free here.
  if (found_inf.defined() && found_inf.item<double>() != 0.0) return;
  const double t = step.item<double>();
  LOOM_ASSERT(t >= 1, "adamw_step: step must count from 1, got ", t);
  const double bc1 = 1.0 - std::pow(o.beta1, t);
  const double bc2 = 1.0 - std::pow(o.beta2, t);
  if (o.weight_decay != 0) at::_foreach_mul_(params, 1.0 - o.lr * o.weight_decay);
  at::_foreach_mul_(exp_avg, o.beta1);
  at::_foreach_add_(exp_avg, grads, 1.0 - o.beta1);
  at::_foreach_mul_(exp_avg_sq, o.beta2);
  at::_foreach_addcmul_(exp_avg_sq, grads, grads, 1.0 - o.beta2);
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(exp_avg_sq);
  at::_foreach_div_(denom, std::sqrt(bc2));
  at::_foreach_add_(denom, o.eps);
  at::_foreach_addcdiv_(params, exp_avg, denom, -o.lr / bc1);
}

}  // namespace

void adamw_step(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                const std::vector<torch::Tensor>& exp_avg, const std::vector<torch::Tensor>& exp_avg_sq,
                const torch::Tensor& step, const AdamWStepOptions& o, const torch::Tensor& found_inf) {
  LOOM_ASSERT(grads.size() == params.size() && exp_avg.size() == params.size() && exp_avg_sq.size() == params.size(),
              "adamw_step: ", params.size(), " params but ", grads.size(), " grads, ", exp_avg.size(), " exp_avg, ",
              exp_avg_sq.size(), " exp_avg_sq");
  if (params.empty()) return;
  torch::NoGradGuard no_grad;
  // Buckets of consecutive tensors; a grad of another dtype is cast inside its bucket only.
  size_t begin = 0;
  while (begin < params.size()) {
    size_t end = begin;
    int64_t cast_bytes = 0;
    std::vector<torch::Tensor> g;
    while (end < params.size() && (end == begin || cast_bytes < kCastBucketBytes)) {
      const bool cast = grads[end].scalar_type() != params[end].scalar_type();
      g.push_back(cast ? grads[end].to(params[end].scalar_type()) : grads[end]);
      if (cast) cast_bytes += params[end].numel() * static_cast<int64_t>(params[end].element_size());
      ++end;
    }
    const auto slice = [&](const std::vector<torch::Tensor>& v) {
      return std::vector<torch::Tensor>(v.begin() + static_cast<std::ptrdiff_t>(begin),
                                        v.begin() + static_cast<std::ptrdiff_t>(end));
    };
    adamw_step_same_dtype(slice(params), g, slice(exp_avg), slice(exp_avg_sq), step, o, found_inf);
    begin = end;
  }
}

}  // namespace loom
