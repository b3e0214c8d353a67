// A callback after each chosen parameter's gradient is accumulated in backward: a post hook on the
// parameter's gradient accumulator (the .grad is complete for this backward when it runs). What
// GradSync's buckets and ZeRO's per-layer reductions start from. RAII: the hooks are removed with
// the object; on GPU they run on autograd's device thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

namespace loom {

class GradReadyHooks {
 public:
  // on_ready(i) after params[i]'s accumulation, for every i with watch[i] (all when watch is empty).
  GradReadyHooks(const std::vector<torch::Tensor>& params, const std::vector<bool>& watch,
                 std::function<void(size_t)> on_ready);
  ~GradReadyHooks();
  GradReadyHooks(const GradReadyHooks&) = delete;
  GradReadyHooks& operator=(const GradReadyHooks&) = delete;

 private:
  struct Hook {
    std::shared_ptr<torch::autograd::Node> accumulator;  // kept alive: the tensor holds it weakly
    uintptr_t key = 0;
  };
  std::vector<Hook> hooks_;
  std::function<void(size_t)> on_ready_;
};

}  // namespace loom
