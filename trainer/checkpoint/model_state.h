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

// A module as a checkpoint component: its named state is model.safetensors. (A run whose weights
// are sharded saves them gathered: the loop's CheckpointSaver does that, this loads them.)
class ModuleState : public Stateful {
 public:
  explicit ModuleState(torch::nn::Module& module) : module_(module) {}
  void save_state(CheckpointContents& into) override { into.model = named_state(module_); }
  void load_state(const std::string& dir) override;

 private:
  torch::nn::Module& module_;
};

}  // namespace loom
