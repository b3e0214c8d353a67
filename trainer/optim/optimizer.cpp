#include "optimizer.h"

#include <algorithm>
#include <cmath>

#include "fp8_linear.h"
#include "fused_adamw.h"
#include "loom/error.h"
#include "torch_compat.h"

#ifdef LOOM_CUDA_KERNELS
#include "cuda_update_stream.h"
#else
namespace loom::cuda {
class UpdateStream {};  // CPU builds never make one (overlap_updates() returns false)
}  // namespace loom::cuda
#endif

namespace loom {

bool takes_weight_decay(const std::string& name, const torch::Tensor& param, const OptimizerOptions& o) {
  const bool embedding = name.find("embed") != std::string::npos;
  return param.dim() >= 2 && (!embedding || o.decay_embeddings);
}

Optimizer::Optimizer(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                     const OptimizerOptions& o)
    : o_(o) {
  o.validate();
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : named_params) {
    if (!p.requires_grad()) continue;
    Slot s;
    s.name = name;
    s.param = p;
    s.master = p.scalar_type() == torch::kFloat32 ? p : p.detach().to(torch::kFloat32).clone();
    s.exp_avg = torch::zeros_like(s.master);
    s.exp_avg_sq = torch::zeros_like(s.master);
    s.unit = layer_of(name) + 1;
    const bool decays = takes_weight_decay(name, p, o);
    (decays ? decay_ : no_decay_).push_back(slots_.size());
    if (!decays) no_decay_names_.push_back(name);
    slots_.push_back(std::move(s));
  }
}

Optimizer::~Optimizer() {
  try {
    settle();  // the side stream must not outlive the tensors it writes
    forget_weight_amax();
  } catch (...) {
  }
}

void Optimizer::publish_weight_amax() {
  for (Slot& s : slots_)
    if (s.param.is_cuda() && s.param.dim() == 2 && s.param.scalar_type() == torch::kBFloat16 && !s.amax.defined())
      s.amax = torch::zeros({}, s.master.options());
}

void Optimizer::forget_weight_amax() {
  for (const Slot& s : slots_)
    if (s.amax.defined()) fp8_forget_amax(s.param);
}

bool Optimizer::overlap_updates() {
#ifdef LOOM_CUDA_KERNELS
  if (stream_) return true;
  if (slots_.empty() || !slots_.front().master.is_cuda()) return false;
  int64_t units = 1;
  for (const Slot& s : slots_) units = std::max(units, s.unit + 1);
  unit_decay_.assign(static_cast<size_t>(units), {});
  unit_no_decay_.assign(static_cast<size_t>(units), {});
  for (size_t i : decay_) unit_decay_[slots_[i].unit].push_back(i);
  for (size_t i : no_decay_) unit_no_decay_[slots_[i].unit].push_back(i);
  stream_ = std::make_unique<cuda::UpdateStream>(slots_.front().master.device().index(), units - 1);
  return true;
#else
  return false;
#endif
}

LayerHooks* Optimizer::layer_hooks() {
#ifdef LOOM_CUDA_KERNELS
  return stream_.get();
#else
  return nullptr;
#endif
}

void Optimizer::settle() const {
#ifdef LOOM_CUDA_KERNELS
  if (stream_) stream_->settle();
#endif
}

void Optimizer::zero_grad() {
  const bool cuda = !slots_.empty() && slots_.front().master.is_cuda();
  for (auto& s : slots_) {
    auto& g = s.param.mutable_grad();
    if (!g.defined()) continue;
    if (!cuda) {
      g.zero_();
      continue;
    }
    // CUDA: released, so the next backward writes fresh gradients where adding to zeros would cost
    // a memset and an add per parameter (8 bytes per parameter: ~17 ms of a 7B step), and the
    // memory serves the next forward's activations meanwhile. update_group() gives a parameter
    // that got no gradient since zeros, as zeroing would have left it.
#ifdef LOOM_CUDA_KERNELS
    if (stream_) stream_->keep_until_done(g);  // the overlapped update may still be reading it
#endif
    g = torch::Tensor();
  }
}

double Optimizer::grad_norm() const {
  torch::NoGradGuard no_grad;
  if (!slots_.empty() && slots_.front().master.is_cuda()) {
    // CUDA: one fp32-accumulating reduction per gradient, no fp32 copies, one read-back.
    std::vector<torch::Tensor> grads;
    for (const auto& s : slots_) grads.push_back(s.param.grad());
    return global_grad_norm(grads).item<double>();
  }
  torch::Tensor sq;
  for (const auto& s : slots_) {
    const auto& g = s.param.grad();
    if (!g.defined()) continue;
    torch::Tensor part = g.to(torch::kFloat32).pow(2).sum();
    sq = sq.defined() ? sq + part : part;
  }
  return sq.defined() ? std::sqrt(sq.item<double>()) : 0.0;
}

void Optimizer::update_group(const std::vector<size_t>& group, const AdamWStepArgs& args, const torch::Tensor& step) {
  // CUDA: the update writes the model's low-precision weights itself (adamw_step's low_precision).
  const bool cuda = !slots_.empty() && slots_.front().master.is_cuda();
  std::vector<torch::Tensor> params, grads, m, v, low, amax;
  std::vector<size_t> published;
  for (size_t i : group) {
    Slot& s = slots_[i];
    torch::Tensor g = s.param.grad();
    if (!g.defined()) {
      if (!s.updated) continue;  // no gradient yet (e.g. a frozen path): leave it alone
      g = torch::zeros_like(s.param);  // released by zero_grad() (CUDA) and not made again since
    }
    s.updated = true;
    params.push_back(s.master);
    grads.push_back(g);  // adamw_step casts bf16 gradients to fp32 bucket by bucket (bounded memory)
    m.push_back(s.exp_avg);
    v.push_back(s.exp_avg_sq);
    if (cuda) low.push_back(s.param);
    amax.push_back(s.amax);  // defined only for CUDA matrices (publish_weight_amax)
    if (s.amax.defined()) published.push_back(i);
  }
  adamw_step(params, grads, m, v, step, o_, args, torch::Tensor(), low, published.empty() ? decltype(amax){} : amax);
  // Queued on this stream behind the update: what a forward reads after waiting for it.
  for (size_t i : published) fp8_publish_amax(slots_[i].param, slots_[i].amax);
}

OptimizerStepResult Optimizer::step(double lr) {
  OptimizerStepResult r;
  r.grad_norm = grad_norm();
  if (!std::isfinite(r.grad_norm)) {
    r.skipped = true;
    return r;
  }
  torch::NoGradGuard no_grad;
  if (slots_.empty()) return r;
  // CUDA: the clip coefficient scales the gradients inside the update (no pass of its own) and the
  // update writes the model's weights. CPU: the gradients are scaled in place, in their own dtype
  // (a bf16 gradient in bf16, before adamw_step casts it), which the CPU references expect.
  const bool cuda = slots_.front().master.is_cuda();
  double grad_scale = 1.0;
  const double coef = clip_coefficient(o_.clip_grad_norm, r.grad_norm);
  if (coef != 1.0) {
    if (cuda) {
      grad_scale = coef;
    } else {
      for (auto& s : slots_)
        if (s.param.grad().defined()) s.param.mutable_grad().mul_(coef);
    }
  }
  ++updates_;
  const AdamWStepArgs decay{lr, /*decay=*/true, grad_scale}, no_decay{lr, /*decay=*/false, grad_scale};
  const auto step_tensor = [this] {
    return torch::full({}, static_cast<double>(updates_),
                       torch::TensorOptions().dtype(torch::kFloat32).device(slots_.front().master.device()));
  };
#ifdef LOOM_CUDA_KERNELS
  if (stream_) {
    torch::Tensor step;  // made on the side stream, where it is used and freed
    stream_->run([&](int64_t unit) {
      if (!step.defined()) step = step_tensor();
      update_group(unit_decay_[unit], decay, step);
      update_group(unit_no_decay_[unit], no_decay, step);
    });
    return r;
  }
#endif
  const torch::Tensor step = step_tensor();
  update_group(decay_, decay, step);
  update_group(no_decay_, no_decay, step);
  if (!cuda)
    for (auto& s : slots_)
      if (!s.master.is_same(s.param)) s.param.copy_(s.master);
  return r;
}

safetensors::NamedTensors Optimizer::state() const {
  settle();
  safetensors::NamedTensors out;
  out.emplace_back("step", torch::full({}, static_cast<double>(updates_), torch::kFloat64));
  for (const auto& s : slots_) {
    out.emplace_back("exp_avg." + s.name, s.exp_avg);
    out.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
    if (!s.master.is_same(s.param)) out.emplace_back("master." + s.name, s.master);
  }
  return out;
}

void Optimizer::load_state(const safetensors::Reader& r) {
  load_state_from([&](const std::string& name) { return r.get(name); }, r.path());
}

void Optimizer::load_state(const safetensors::NamedTensors& state, const std::string& where) {
  load_state_from(
      [&](const std::string& name) {
        for (const auto& [n, t] : state)
          if (n == name) return t;
        LOOM_FAIL(where, ": no optimizer tensor '", name, "'");
      },
      where);
}

void Optimizer::load_state_from(const std::function<torch::Tensor(const std::string&)>& get,
                                const std::string& where) {
  settle();
  forget_weight_amax();
  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& name, torch::Tensor& into) {
    torch::Tensor t = get(name);
    LOOM_CHECK(t.sizes() == into.sizes(), where, ": tensor '", name, "' has shape ", t.sizes(),
               ", the optimizer expects ", into.sizes());
    into.copy_(t);
  };
  const double step = get("step").item<double>();
  LOOM_CHECK(step >= 0 && step == std::floor(step), where, ": bad optimizer step ", step);
  for (auto& s : slots_) {
    load("exp_avg." + s.name, s.exp_avg);
    load("exp_avg_sq." + s.name, s.exp_avg_sq);
    if (!s.master.is_same(s.param)) {
      load("master." + s.name, s.master);
      s.param.copy_(s.master);  // the model's low-precision copy follows its master
    }
  }
  updates_ = static_cast<int64_t>(step);
}

}  // namespace loom
