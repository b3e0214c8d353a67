// A module's parameters and buffers by their LibTorch names (what model.safetensors holds), and
// loading them back with every name and shape checked.
#pragma once

#include <torch/torch.h>

#include "safetensors.h"

namespace loom {

safetensors::NamedTensors named_state(const torch::nn::Module& module);
// Copies every parameter and buffer of module from r (converting dtype if needed). Throws
// loom::Error naming the file and tensor on a missing tensor or a shape mismatch.
void load_named_state(torch::nn::Module& module, const safetensors::Reader& r);

}  // namespace loom
