// Activation checkpointing (torch.utils.checkpoint's reentrant form, which LibTorch C++ lacks):
// the forward runs without keeping activations; the backward runs it again with grad enabled and
// back-propagates through that copy. The random generator state of the first run (CPU, and the
// input's CUDA device when there is one) is restored for the recompute, so dropout draws the same
// masks, and put back afterwards, so the rest of the run draws the same numbers as without
// checkpointing: gradients are bitwise those of the plain forward.
#pragma once

#include <functional>

#include <torch/torch.h>

namespace loom {

using CheckpointedFn = std::function<torch::Tensor(const torch::Tensor&)>;

// fn(x), recomputed in backward. Everything fn reads besides x (masks, rotary tables) must be
// captured by value and not require grad; parameters fn uses receive their gradients through the
// recompute. When grad mode is off, or x does not require grad, this is just fn(x).
torch::Tensor checkpoint(const CheckpointedFn& fn, const torch::Tensor& x);

}  // namespace loom
