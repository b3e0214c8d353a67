#include "fused_adamw.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "loom/error.h"
#include "torch_compat.h"

#ifdef LOOM_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>

#include "cuda/kernels.h"
#endif

namespace loom {

bool adamw_is_fused(const torch::Device& device) { return LOOM_TORCH2 && device.is_cuda(); }

void AdamOptions::validate() const {
  LOOM_CHECK(lr >= 0, "adam.lr must be >= 0, got ", lr);
  LOOM_CHECK(beta1 >= 0 && beta1 < 1, "adam.adam_beta1 must be in [0, 1), got ", beta1);
  LOOM_CHECK(beta2 >= 0 && beta2 < 1, "adam.adam_beta2 must be in [0, 1), got ", beta2);
  LOOM_CHECK(eps > 0, "adam.adam_eps must be > 0, got ", eps);
  LOOM_CHECK(weight_decay >= 0, "adam.weight_decay must be >= 0, got ", weight_decay);
}

void HybridZeroOptions::validate() const {
  LOOM_CHECK(clip_grad_norm >= 0, "hybrid_zero_optimizer.clip_grad_norm must be >= 0 (0 = off), got ", clip_grad_norm);
}

void OptimizerOptions::validate() const {
  AdamOptions::validate();
  HybridZeroOptions::validate();
}

double clip_coefficient(double max_norm, double norm) {
  if (max_norm <= 0) return 1.0;
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

namespace {

// The scalars of one update: OptimizerOptions and the step's arguments, resolved once.
struct Hyper {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;
};

// One update over tensors whose grads already have the params' dtype.
void adamw_step_same_dtype(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                           const std::vector<torch::Tensor>& exp_avg, const std::vector<torch::Tensor>& exp_avg_sq,
                           const torch::Tensor& step, const Hyper& o, const torch::Tensor& found_inf) {
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

#ifdef LOOM_CUDA_KERNELS
// Whether tensor i takes loom's bf16-gradient kernel.
bool takes_kernel(size_t i, const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                  const std::vector<torch::Tensor>& m, const std::vector<torch::Tensor>& v,
                  const std::vector<torch::Tensor>& low, const torch::Tensor& step, const torch::Tensor& found_inf) {
  const torch::Tensor& p = params[i];
  const auto fp32_like = [&](const torch::Tensor& t) {
    return t.scalar_type() == torch::kFloat32 && t.device() == p.device() && t.is_contiguous() && t.numel() == p.numel();
  };
  const bool low_ok = low.empty() || (low[i].scalar_type() == torch::kBFloat16 && low[i].device() == p.device() &&
                                      low[i].is_contiguous() && low[i].numel() == p.numel());
  return p.is_cuda() && fp32_like(p) && fp32_like(m[i]) && fp32_like(v[i]) &&
         grads[i].scalar_type() == torch::kBFloat16 && grads[i].device() == p.device() && grads[i].is_contiguous() &&
         grads[i].numel() == p.numel() && low_ok && step.scalar_type() == torch::kFloat32 && step.device() == p.device() &&
         (!found_inf.defined() || (found_inf.scalar_type() == torch::kFloat32 && found_inf.device() == p.device()));
}
#endif

}  // namespace

void adamw_step(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                const std::vector<torch::Tensor>& exp_avg, const std::vector<torch::Tensor>& exp_avg_sq,
                const torch::Tensor& step, const OptimizerOptions& options, const AdamWStepArgs& args,
                const torch::Tensor& found_inf, const std::vector<torch::Tensor>& low_precision,
                const std::vector<torch::Tensor>& amax) {
  LOOM_ASSERT(grads.size() == params.size() && exp_avg.size() == params.size() && exp_avg_sq.size() == params.size(),
              "adamw_step: ", params.size(), " params but ", grads.size(), " grads, ", exp_avg.size(), " exp_avg, ",
              exp_avg_sq.size(), " exp_avg_sq");
  LOOM_ASSERT(low_precision.empty() || low_precision.size() == params.size(), "adamw_step: ", params.size(),
              " params but ", low_precision.size(), " low-precision copies");
  LOOM_ASSERT(amax.empty() || (amax.size() == params.size() && !low_precision.empty()), "adamw_step: ",
              amax.size(), " amax outputs for ", params.size(), " params and ", low_precision.size(),
              " low-precision copies");
  if (params.empty()) return;
  const Hyper o{args.lr, options.beta1, options.beta2, options.eps, args.decay ? options.weight_decay : 0.0,
                args.grad_scale};
  torch::NoGradGuard no_grad;
  std::vector<size_t> rest;  // tensors for the ATen / reference path
#ifdef LOOM_CUDA_KERNELS
  std::vector<cuda::AdamWTensor> kernel;
  for (size_t i = 0; i < params.size(); ++i) {
    const bool amax_ok = amax.empty() || !amax[i].defined() ||
                         (amax[i].scalar_type() == torch::kFloat32 && amax[i].device() == params[i].device());
    if (!amax_ok || !takes_kernel(i, params, grads, exp_avg, exp_avg_sq, low_precision, step, found_inf)) {
      rest.push_back(i);
      continue;
    }
    kernel.push_back(cuda::AdamWTensor{params[i].data_ptr<float>(), exp_avg[i].data_ptr<float>(),
                                       exp_avg_sq[i].data_ptr<float>(), grads[i].data_ptr(),
                                       low_precision.empty() ? nullptr : low_precision[i].data_ptr(),
                                       amax.empty() || !amax[i].defined() ? nullptr : amax[i].data_ptr<float>(),
                                       params[i].numel()});
  }
  if (!kernel.empty()) {
    const char* error = cuda::adamw_bf16_grads(
        kernel.data(), static_cast<int64_t>(kernel.size()), static_cast<float>(o.lr), static_cast<float>(o.beta1),
        static_cast<float>(o.beta2), static_cast<float>(o.eps), static_cast<float>(o.weight_decay),
        static_cast<float>(o.grad_scale), step.data_ptr<float>(),
        found_inf.defined() ? found_inf.data_ptr<float>() : nullptr,
        at::cuda::getCurrentCUDAStream(params.front().device().index()).stream());
    LOOM_CHECK(error == nullptr, "CUDA kernel adamw_bf16_grads failed to launch: ", error);
  }
#else
  for (size_t i = 0; i < params.size(); ++i) rest.push_back(i);
#endif
  // Buckets of consecutive tensors; a grad of another dtype is cast inside its bucket only.
  size_t begin = 0;
  while (begin < rest.size()) {
    size_t end = begin;
    int64_t cast_bytes = 0;
    std::vector<torch::Tensor> p, g, m, v;
    while (end < rest.size() && (end == begin || cast_bytes < kCastBucketBytes)) {
      const size_t i = rest[end];
      const bool cast = grads[i].scalar_type() != params[i].scalar_type();
      torch::Tensor gi = cast ? grads[i].to(params[i].scalar_type()) : grads[i];
      if (o.grad_scale != 1.0) gi = cast ? gi.mul_(o.grad_scale) : gi.mul(o.grad_scale);  // grads stay as given
      g.push_back(gi);
      p.push_back(params[i]), m.push_back(exp_avg[i]), v.push_back(exp_avg_sq[i]);
      if (cast) cast_bytes += params[i].numel() * static_cast<int64_t>(params[i].element_size());
      ++end;
    }
    adamw_step_same_dtype(p, g, m, v, step, o, found_inf);
    if (!low_precision.empty())
      for (size_t k = begin; k < end; ++k) {
        const size_t i = rest[k];
        low_precision[i].copy_(params[i]);
        if (!amax.empty() && amax[i].defined()) amax[i].copy_(low_precision[i].abs().max());
      }
    begin = end;
  }
}

torch::Tensor global_grad_norm(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> rest;  // those loom's kernel does not take
  for (const auto& g : grads)
    if (g.defined()) rest.push_back(g);
  if (rest.empty()) return torch::zeros({}, torch::kFloat32);
  torch::Tensor sq;  // the kernel's sum of squares, fp32 scalar
#ifdef LOOM_CUDA_KERNELS
  // Contiguous bf16 on one device (the bf16 model's gradients): one pass at the bandwidth's limit.
  const torch::Device device = rest.front().device();
  std::vector<const void*> ptrs;
  std::vector<int64_t> sizes;
  std::vector<torch::Tensor> others;
  for (const auto& g : rest) {
    if (g.is_cuda() && g.device() == device && g.scalar_type() == torch::kBFloat16 && g.is_contiguous()) {
      ptrs.push_back(g.data_ptr());
      sizes.push_back(g.numel());
    } else {
      others.push_back(g);
    }
  }
  if (!ptrs.empty()) {
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    const torch::Tensor partials =
        torch::empty({cuda::sum_squares_partials(sizes.data(), static_cast<int64_t>(sizes.size()))}, f32);
    sq = torch::empty({}, f32);
    const char* error = cuda::sum_squares_bf16(ptrs.data(), sizes.data(), static_cast<int64_t>(ptrs.size()),
                                               partials.data_ptr<float>(), sq.data_ptr<float>(),
                                               at::cuda::getCurrentCUDAStream(device.index()).stream());
    LOOM_CHECK(error == nullptr, "CUDA kernel sum_squares_bf16 failed to launch: ", error);
    rest = std::move(others);
  }
#endif
  std::vector<torch::Tensor> norms;
#if LOOM_TORCH2
  if (!rest.empty() && rest.front().is_cuda()) {
    // CUDA: one multi-tensor launch per dtype (the foreach kernel wants one dtype per list) in place
    // of a reduction per tensor: 218 launches and 1.2 ms of host-bound idle GPU in a 1b step.
    std::vector<std::vector<torch::Tensor>> by_dtype;
    for (const auto& g : rest) {
      auto it = std::find_if(by_dtype.begin(), by_dtype.end(),
                             [&g](const auto& list) { return list.front().scalar_type() == g.scalar_type(); });
      if (it == by_dtype.end()) by_dtype.push_back({g});
      else it->push_back(g);
    }
    for (const auto& list : by_dtype)
      for (const auto& n : at::_foreach_norm(list, 2, torch::kFloat32)) norms.push_back(n);
  } else
#endif
  {
    for (const auto& g : rest) norms.push_back(at::linalg_vector_norm(g, 2, /*dim=*/{}, false, torch::kFloat32));
  }
  if (!sq.defined()) return at::linalg_vector_norm(torch::stack(norms), 2, /*dim=*/{}, false, torch::kFloat32);
  if (!norms.empty()) sq = sq + torch::stack(norms).square().sum();
  return sq.sqrt();
}

}  // namespace loom
