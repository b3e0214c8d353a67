// Data-parallel gradient synchronisation: SUM all-reduce of every parameter's gradient in buckets,
// launched from autograd hooks as soon as a bucket's gradients are ready, so communication overlaps
// the rest of the backward pass (on GPU; Gloo on CPU overlaps with its own threads).
//
// The loop's loss is the token SUM divided by the GLOBAL token count of the step (all ranks, all
// micro-batches), so each rank's gradient is already its share of the global mean: gradients are
// SUMMED over ranks, never averaged (averaging would be wrong whenever ranks hold different token
// counts).
//
// Buckets. Parameters are taken in reverse registration order (the order backward produces them)
// and cut into buckets of about `bucket_bytes`, never mixing dtypes. A hook on each parameter's
// gradient accumulator copies the accumulated .grad into its bucket; a full bucket is launched.
// Collectives must run in the same order on every rank, so bucket i is launched only after buckets
// 0..i-1 (a bucket that fills early waits for its predecessors). finish() launches what is left
// (a parameter that got no gradient contributes zeros), waits, and writes the sums back to .grad.
//
// Accumulation. With micro_num > 1 only the last micro-batch communicates: prepare(false) before
// the other backwards leaves the hooks idle, so .grad accumulates locally; prepare(true) arms them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <torch/torch.h>

#include "communicator.h"
#include "grad_ready_hooks.h"

namespace loom {

struct GradSyncOptions {
  int64_t bucket_bytes = 25ll << 20;  // parallel.bucket_mb
};

// Makes every rank's parameters equal to rank 0's (call once before training).
void broadcast_parameters(Communicator& comm, const std::vector<torch::Tensor>& params);

class GradSync {
 public:
  GradSync(Communicator& comm, std::vector<torch::Tensor> params, GradSyncOptions opts);
  ~GradSync();  // removes the hooks
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Before each micro-batch's backward: last = this is the step's final micro-batch.
  void prepare(bool last);
  // After the final backward: every parameter's .grad holds the SUM over ranks.
  void finish();

  size_t num_buckets() const { return buckets_.size(); }
  // Buckets of the last finish() that were launched during backward (from hooks), not by finish().
  size_t launched_during_backward() const { return launched_in_hooks_; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offsets;  // element offset of each in flat
    torch::Tensor flat;
    size_t ready = 0;
    bool launched = false;
    Communicator::Pending pending;
  };
  void on_grad_ready(size_t param);  // from the autograd hook
  void launch_ready_prefix();        // launches buckets in order while they are full
  void launch(Bucket& b);

  Communicator& comm_;
  std::vector<torch::Tensor> params_;
  std::vector<size_t> bucket_of_, slot_of_;   // param -> bucket, position in bucket
  std::vector<bool> seen_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool armed_ = false;
  size_t launched_in_hooks_ = 0;
  std::mutex mu_;  // hooks run on autograd's device threads on GPU
  std::unique_ptr<GradReadyHooks> hooks_;
};

}  // namespace loom
