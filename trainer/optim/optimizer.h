// AdamW with two parameter groups, fp32 master weights, global-norm clipping and inf/NaN skip.
//
// Groups: weight decay applies to matrices (dim >= 2); norms and biases (dim < 2) never decay, and
// embeddings (names containing "embed") decay only with adam.decay_embeddings. When a parameter is
// not fp32 (model.dtype bf16/fp16) the optimizer keeps an fp32 master copy, updates that, and
// copies it back into the model's parameter: small updates are not lost to rounding.
// One step: global L2 norm of all gradients (in fp32) -> if not finite, the update is skipped
// (weights, moments and the step count unchanged; the caller counts it) -> else gradients are
// scaled by clip_coefficient (InternLM's clip) and adamw_step (fused_adamw.h) runs with the given lr.
// On CUDA the update may run beside the next step's forward (overlap_updates, cuda_update_stream.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "fused_adamw.h"
#include "layer_hooks.h"
#include "safetensors.h"

namespace loom {

namespace cuda {
class UpdateStream;
}

struct OptimizerStepResult {
  double grad_norm = 0;  // before clipping (inf or nan when skipped)
  bool skipped = false;  // inf/NaN gradients: nothing was updated
};

// The group rule: matrices decay; norms, biases and (unless decay_embeddings) embeddings do not.
bool takes_weight_decay(const std::string& name, const torch::Tensor& param, const OptimizerOptions& o);

class Optimizer {
 public:
  Optimizer(const std::vector<std::pair<std::string, torch::Tensor>>& named_params, const OptimizerOptions& o);
  ~Optimizer();

  // CUDA builds, parameters on a CUDA device: from now on step() queues the update on a side stream
  // unit by unit (the weights outside the decoder layers, then layer 0, 1, ...); the model must
  // call layer_hooks() so that its next forward waits for each unit's update just before using
  // it. False (nothing changes) where that cannot be done.
  bool overlap_updates();
  LayerHooks* layer_hooks();
  // Waits for an update still running beside the forward: before reading the weights or state()
  // other than through the model's forward. state() and load_state() call it themselves.
  void settle() const;

  // FP8 runs: from now on each update on CUDA also measures its bf16 matrices' absolute maxima, in
  // the same pass, and publishes them to fp8_linear (fp8_linear.h), which then skips its own pass
  // over those weights. forget_weight_amax() withdraws them (a write that bypasses ATen, such as a
  // broadcast into the weights, must call it; load_state() does).
  void publish_weight_amax();
  void forget_weight_amax();

  OptimizerStepResult step(double lr);
  // CPU: zeroes the gradients. CUDA: releases them (the next backward makes them anew). Call it
  // after step() and before the next backward: an overlapped update may still be reading them.
  void zero_grad();
  // Global L2 norm of the current gradients (fp32; inf/nan propagate). Missing grads count as 0.
  double grad_norm() const;

  // "step", "exp_avg.NAME", "exp_avg_sq.NAME", "master.NAME" (see checkpoint.h).
  safetensors::NamedTensors state() const;
  // Restores state(); throws loom::Error naming the file on a missing tensor or a shape mismatch.
  void load_state(const safetensors::Reader& r);
  // The same from tensors in memory (a ZeRO-1 checkpoint gathered into state()'s names); where
  // names their source in errors.
  void load_state(const safetensors::NamedTensors& state, const std::string& where);

  int64_t updates() const { return updates_; }
  size_t num_decay() const { return decay_.size(); }
  size_t num_no_decay() const { return no_decay_.size(); }
  const std::vector<std::string>& no_decay_names() const { return no_decay_names_; }

 private:
  struct Slot {
    std::string name;
    torch::Tensor param;   // the model's
    torch::Tensor master;  // fp32 copy, or param itself when param is fp32
    torch::Tensor exp_avg, exp_avg_sq;
    int64_t unit = 0;  // 0: outside the decoder layers; 1 + K: layer K (cuda_update_stream.h)
    bool updated = false;  // has had a gradient: a missing one later counts as zeros
    torch::Tensor amax;    // publish_weight_amax(): max |param| after the last update (fp32 scalar)
  };
  // The update of the slots in group (those with a gradient); step: this update's number, a float32
  // scalar on the device.
  void update_group(const std::vector<size_t>& group, const AdamWStepArgs& args, const torch::Tensor& step);
  void load_state_from(const std::function<torch::Tensor(const std::string&)>& get, const std::string& where);

  OptimizerOptions o_;
  std::vector<Slot> slots_;
  std::vector<size_t> decay_, no_decay_;
  std::vector<std::string> no_decay_names_;
  int64_t updates_ = 0;
  std::unique_ptr<cuda::UpdateStream> stream_;         // overlap_updates()
  std::vector<std::vector<size_t>> unit_decay_, unit_no_decay_;  // the groups, unit by unit
};

}  // namespace loom
