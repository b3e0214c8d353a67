// The parameter update of a data-parallel step, in one of two modes chosen by parallel.zero1 and
// parallel.zero_stage:
//
//   replicated (parallel.zero1 = 1, zero_stage 1): with W > 1 a GradSync sums the gradients over
//     ranks during the last micro-batch's backward (grad_sync.h), then every rank runs the same
//     Optimizer step (optimizer.h) on the same sums, so the weights stay identical without another
//     collective.
//   sharded (parallel.zero1 = S != 1, -1 or 0 = all ranks): ZeroOptimizer (zero.h) at
//     parallel.zero_stage 1 (optimizer state), 2 (+ gradients) or 3 (+ weights). Used at W = 1 too,
//     so a sharded run's checkpoints keep their kind whatever W resumes them.
//
// Either way the loss was divided by the GLOBAL token count before backward, so gradients are
// summed, never averaged, and the grad norm, clipping and inf/NaN skip are global: every rank
// skips together.
//
// Checkpoints: replicated -> optimizer.safetensors (written by rank 0); sharded ->
// optimizer_zero1_K.safetensors (shard K of parallel.zero1, written by its rank, any stage).
// load() reads either kind into either mode, so parallel.zero1, parallel.zero_stage and the world
// size may change between save and resume. model.safetensors stays whole (rank 0 writes it; at
// stage 3 it is gathered unit by unit), so export-hf and generate read any checkpoint.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "checkpoint.h"
#include "communicator.h"
#include "optimizer.h"

namespace loom {

class GradSync;
class LayerHooks;
class ZeroOptimizer;

struct ParallelOptions {
  int64_t zero1 = 1;             // parallel.zero1: optimizer-state shards (1 = off; -1 or 0 = every rank)
  double bucket_mb = 25;         // parallel.bucket_mb: gradient all-reduce bucket size
  double timeout_s = 600;        // parallel.timeout_s: a collective waiting longer fails the job
  std::string backend = "auto";  // parallel.backend: auto | gloo | nccl
  int64_t zero_stage = 1;        // parallel.zero_stage: 1 optimizer state, 2 + gradients, 3 + weights
  void validate() const;
};

class DataParallelUpdate {
 public:
  // named: the model's trainable parameters (named_state order; buffers are skipped).
  DataParallelUpdate(Communicator& comm, const safetensors::NamedTensors& named, const OptimizerOptions& o,
                     const ParallelOptions& p);
  ~DataParallelUpdate();
  DataParallelUpdate(const DataParallelUpdate&) = delete;
  DataParallelUpdate& operator=(const DataParallelUpdate&) = delete;

  // Makes every rank's parameters rank 0's (after initialisation or loading); at ZeRO stage 3 the
  // parameters are then sharded: from here on the model reaches them through layer_hooks().
  void broadcast_parameters();
  // FP8 runs: the replicated optimizer measures the weights' maxima in its update
  // (Optimizer::publish_weight_amax). ZeRO leaves them to the forward: a shard's maximum is not
  // its weight's.
  void publish_fp8_weight_amax();
  // What the model must call around its layers (ZeRO stage 3, or the replicated optimizer's update
  // overlapped with the forward: adam.overlap_update on CUDA), else nullptr.
  LayerHooks* layer_hooks();
  // The model's state as model.safetensors holds it, from named_state(model): at ZeRO stage 3 the
  // parameters are gathered (every rank must call it; rank 0 gets them, as CPU tensors: into
  // host_for's when given, see ZeroOptimizer::gather_named_parameters). Elsewhere `named` itself.
  safetensors::NamedTensors whole_model_state(const safetensors::NamedTensors& named,
                                              const std::function<torch::Tensor(const std::string&, const torch::Tensor&)>& host_for = {});
  // Bytes of parameter storage this rank holds between steps (measured from the storages).
  int64_t resident_parameter_bytes() const;
  // Before each micro-batch's backward; last = the step's final one (only it communicates).
  void before_backward(bool last);
  // After the final backward: synchronise, clip, update (or skip on inf/NaN, on every rank).
  OptimizerStepResult step(double lr);
  void zero_grad();

  int64_t updates() const;
  bool sharded() const { return zero_ != nullptr; }
  int shards() const;
  int zero_stage() const;
  std::string describe() const;  // one log line: mode, shards, buckets
  size_t num_decay() const { return num_decay_; }
  size_t num_no_decay() const { return named_.size() - num_decay_; }

  // Replicated: the tensors of optimizer.safetensors (rank 0 writes them). Sharded: empty.
  safetensors::NamedTensors replicated_state() const;
  // Sharded: writes this rank's shard into dir when it holds a distinct one, and returns its
  // manifest entry; nullopt otherwise.
  std::optional<CheckpointFile> save_shard(const std::string& dir) const;
  // The same shard into c.shard* (tensors still on the device), for a save that writes it later.
  void shard_contents(CheckpointContents& c) const;
  // shard_contents' name and tensors as shapes only (meta tensors), to make host buffers early.
  void shard_layout(CheckpointContents& c) const;
  // Restores the optimizer state of a checkpoint directory written in either mode at any W. The
  // model's weights must already be loaded (an fp32 model's master weights are its parameters).
  void load(const std::string& dir);

 private:
  Communicator& comm_;
  safetensors::NamedTensors named_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<GradSync> sync_;
  std::unique_ptr<ZeroOptimizer> zero_;
  size_t num_decay_ = 0;
};

}  // namespace loom
