// ZeRO stage 1 (parallel.zero1 = S, InternLM's meaning: the optimizer state is split S ways):
// fp32 master weights and AdamW's two moments are sharded over the data-parallel ranks; gradients
// stay whole on every rank.
//
// Layout. All parameters, flattened in registration order, form one vector of N elements, padded
// with zeros to P = S * ceil(N / S). Shard s is [s*P/S, (s+1)*P/S). Rank r holds shard r % S, so with
// S < W the W/S ranks of a shard compute the same update redundantly (S must divide W).
//
// Step (every rank, same order):
//   1. reduce-scatter the local gradient sums (S == W; else all-reduce and keep the shard),
//      scaled by grad_scale (1 / global tokens if the loss was not normalised before backward)
//   2. global grad norm: each distinct shard's sum of squares (float64), all-reduced once; an
//      inf/NaN anywhere makes the norm non-finite on every rank, so every rank skips together
//   3. clip: the shard is scaled by clip_coefficient(clip_grad_norm, norm), the replicated
//      optimizer's coefficient (fused_adamw.h)
//   4. AdamW on the shard: adamw_step, the replicated optimizer's update, on views of the flat
//      fp32 master, moments and gradient, one view per run of parameters with the same weight-decay
//      rule (padding is left alone); on CUDA that is the fused multi-tensor kernel
//   5. all-gather the fp32 shards and copy them into the model's parameters (in their dtype)
//
// Checkpoint. The ranks of shards 0..S-1 each write their shard (master, exp_avg, exp_avg_sq) with
// its element range; load() reads any set of such files that covers [0, N) and takes the part of
// each that overlaps this rank's new shard, so a run saved at one W/S resumes at another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "communicator.h"
#include "fused_adamw.h"
#include "safetensors.h"

namespace loom {

struct Zero1StepResult {
  double grad_norm = 0;  // before clipping
  bool skipped = false;  // inf/NaN: no update, step count unchanged
};

// Shard files of one checkpoint (any W/S) gathered into whole flat vectors [numel] fp32 on the CPU:
// what a run without ZeRO-1 needs to resume from a ZeRO-1 checkpoint. Checks as load_shards, and
// that the files cover [0, numel) exactly once.
struct Zero1FullState {
  torch::Tensor master, exp_avg, exp_avg_sq;
  int64_t updates = 0;
};
Zero1FullState read_zero1_shards(const std::vector<std::string>& paths);

class Zero1Optimizer {
 public:
  // decay[i]: whether params[i] takes weight decay (false for norms, biases, embeddings).
  // opts: the replicated optimizer's options (decay_embeddings is already in `decay`).
  // shards: parallel.zero1 (-1 or 0 = all ranks; must divide the world size).
  Zero1Optimizer(Communicator& comm, std::vector<torch::Tensor> params, const std::vector<bool>& decay,
                 const OptimizerOptions& opts, int shards);

  // After the last backward of a step (each rank's .grad holds its LOCAL gradient sum).
  Zero1StepResult step(double lr, double grad_scale = 1.0);
  void zero_grad();

  int shards() const { return shards_; }
  int64_t numel() const { return numel_; }
  int64_t updates() const { return updates_; }  // successful AdamW steps (t in the bias correction)
  // This rank's element range of the unpadded vector [begin, end).
  int64_t shard_begin() const;
  int64_t shard_end() const;
  // Whether this rank writes a shard file (one rank per distinct shard).
  bool writes_shard() const { return comm_.rank() < shards_; }

  // Writes this rank's shard (call only where writes_shard()).
  safetensors::WriteResult save_shard(const std::string& path) const;
  // Loads from the shard files of a checkpoint saved at any W/S (every file, in any order).
  void load_shards(const std::vector<std::string>& paths);
  // Loads from whole flat vectors [numel] (fp32, any device): a replicated optimizer's state in
  // this optimizer's parameter order (a checkpoint written without ZeRO-1).
  void load_full(const torch::Tensor& master, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                 int64_t updates);

 private:
  void gather_params();

  Communicator& comm_;
  std::vector<torch::Tensor> params_;
  OptimizerOptions opts_;
  int shards_ = 1;
  int shard_index_ = 0;
  int64_t numel_ = 0, padded_ = 0, shard_size_ = 0;
  std::vector<int64_t> offsets_;  // of each parameter in the flat vector
  torch::Tensor master_, exp_avg_, exp_avg_sq_;  // [shard_size] fp32
  // Runs [begin, begin + length) of the shard with weight decay, and without (step 4's views).
  struct Run {
    int64_t begin, length;
  };
  std::vector<Run> decay_runs_, plain_runs_;
  torch::Tensor flat_grad_;  // [padded] fp32
  int64_t updates_ = 0;
};

}  // namespace loom
