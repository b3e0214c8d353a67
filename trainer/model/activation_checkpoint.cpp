#include "activation_checkpoint.h"

#include "loom/error.h"
#include "torch_compat.h"

namespace loom {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The generator states a recompute needs: CPU always, plus the input's accelerator if any.
struct RngSnapshot {
  torch::Tensor cpu;
  c10::optional<torch::Device> device;
  torch::Tensor device_state;

  static RngSnapshot take(const torch::Device& input_device) {
    RngSnapshot s;
    s.cpu = compat::get_rng_state(torch::kCPU);
    if (!input_device.is_cpu()) {
      s.device = input_device;
      s.device_state = compat::get_rng_state(input_device);
    }
    return s;
  }
  void restore() const {
    compat::set_rng_state(torch::kCPU, cpu);
    if (device) compat::set_rng_state(*device, device_state);
  }
};

// What backward needs besides the saved input; travels in ctx->saved_data as an IValue capsule.
struct Recompute : torch::CustomClassHolder {
  CheckpointedFn fn;
  RngSnapshot rng;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const c10::intrusive_ptr<Recompute>& recompute) {
    recompute->rng = RngSnapshot::take(x.device());
    torch::Tensor out;
    {
      torch::NoGradGuard no_grad;
      out = recompute->fn(x);
    }
    ctx->save_for_backward({x});
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(recompute);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    LOOM_ASSERT(recompute, "activation checkpoint: recompute state missing in backward");

    // Recompute under the forward's RNG state, then give the generators back their current state.
    const RngSnapshot now = RngSnapshot::take(x.device());
    recompute->rng.restore();
    torch::Tensor input = x.detach().requires_grad_(true);
    torch::Tensor out;
    {
      torch::AutoGradMode grad_on(true);
      out = recompute->fn(input);
    }
    now.restore();

    // Reentrant backward: parameter gradients accumulate as in the plain graph.
    torch::autograd::backward({out}, {grad_out[0]});
    return {input.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint(const CheckpointedFn& fn, const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return fn(x);
  auto recompute = c10::make_intrusive<Recompute>();
  recompute->fn = fn;
  return CheckpointFunction::apply(x, recompute);
}

}  // namespace loom
