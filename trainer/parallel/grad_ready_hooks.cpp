#include "grad_ready_hooks.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include "loom/error.h"

namespace loom {

GradReadyHooks::GradReadyHooks(const std::vector<torch::Tensor>& params, const std::vector<bool>& watch,
                               std::function<void(size_t)> on_ready)
    : on_ready_(std::move(on_ready)) {
  LOOM_ASSERT(watch.empty() || watch.size() == params.size(), "GradReadyHooks: ", watch.size(), " flags for ",
              params.size(), " parameters");
  for (size_t i = 0; i < params.size(); ++i) {
    if (!watch.empty() && !watch[i]) continue;
    Hook h;
    h.accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    LOOM_ASSERT(h.accumulator != nullptr, "parameter ", i, " has no gradient accumulator");
    h.key = h.accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_ready_(i);
          return outputs;
        }));
    hooks_.push_back(std::move(h));
  }
}

GradReadyHooks::~GradReadyHooks() {
  for (Hook& h : hooks_) h.accumulator->del_post_hook(h.key);
}

}  // namespace loom
