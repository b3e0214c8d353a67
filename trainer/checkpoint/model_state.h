// A module's parameters and buffers by their LibTorch names (what model.safetensors holds), and
// loading them back with every name and shape checked.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "safetensors.h"
#include "stateful.h"

namespace loom {

safetensors::NamedTensors named_state(const torch::nn::Module& module);
// Copies every parameter and buffer of module from r (converting dtype if needed). Throws
// loom::Error naming the file and tensor on a missing tensor or a shape mismatch.
void load_named_state(torch::nn::Module& module, const safetensors::Reader& r);

// A checkpoint's fp32 weights, whatever model.dtype saved it: a model that is not fp32 keeps them
// as optimizer.safetensors' master.NAME (model.safetensors holds them rounded); an fp32 model keeps
// no masters, its model.safetensors holds them. So a resume may change model.dtype both ways and
// still train on from the exact weights.
//
// The fp32 weights of `name`: optimizer's master.NAME, else model's NAME when it is fp32. Throws
// loom::Error naming both files when neither holds them.
torch::Tensor checkpoint_master(const safetensors::Reader& optimizer, const safetensors::Reader& model,
                                const std::string& name);
// Checkpoint dir's optimizer.safetensors tensors with master.NAME added (checkpoint_master) for each
// of `names` that it lacks: the state of a model that is not fp32, resumed from an fp32 one's.
safetensors::NamedTensors optimizer_state_with_masters(const std::string& dir, const std::vector<std::string>& names);

// A module as a checkpoint component: its named state is model.safetensors, and an fp32 tensor
// takes the checkpoint's master.NAME where there is one (a checkpoint of a bf16 model). (A run
// whose weights are sharded saves them gathered: the loop's CheckpointSaver does that, this loads them.)
class ModuleState : public Stateful {
 public:
  explicit ModuleState(torch::nn::Module& module) : module_(module) {}
  void save_state(CheckpointContents& into) override { into.model = named_state(module_); }
  void load_state(const std::string& dir) override;

 private:
  torch::nn::Module& module_;
};

}  // namespace loom
