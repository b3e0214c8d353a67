// A module's parameters and buffers by their LibTorch names (what model.safetensors holds), and
// loading them back with every name and shape checked.
#pragma once

#include <functional>
#include <utility>

#include <torch/torch.h>

#include "safetensors.h"
#include "stateful.h"

namespace loom {

safetensors::NamedTensors named_state(const torch::nn::Module& module);
// Copies every parameter and buffer of module from r (converting dtype if needed). Throws
// loom::Error naming the file and tensor on a missing tensor or a shape mismatch.
void load_named_state(torch::nn::Module& module, const safetensors::Reader& r);

// A module as a checkpoint component: its named state is model.safetensors. When its weights are
// sharded (ZeRO stage 3), `whole` returns them gathered, and save_state writes that instead.
class ModuleState : public Stateful {
 public:
  using Whole = std::function<safetensors::NamedTensors()>;
  explicit ModuleState(torch::nn::Module& module, Whole whole = {}) : module_(module), whole_(std::move(whole)) {}
  void save_state(CheckpointContents& into) override { into.model = whole_ ? whole_() : named_state(module_); }
  void load_state(const std::string& dir) override;

 private:
  torch::nn::Module& module_;
  Whole whole_;
};

}  // namespace loom
