// ZeRO stages 1-3 (parallel.zero_stage) over the data-parallel ranks, on c10d's collectives.
// parallel.zero1 = S (InternLM's meaning) splits the state S ways; with S < W the W/S groups of S
// ranks replicate each other (hybrid sharding: rank r holds shard r % S; S must divide W).
//
//   stage 1: fp32 master weights and AdamW's moments are sharded; gradients and weights stay whole
//            on every rank. Gradients accumulate over micro-batches and are reduce-scattered once,
//            in step().
//   stage 2: + gradients. A layer's gradients are reduce-scattered in fp32 during backward as soon
//            as the layer's last one is ready, added to this rank's fp32 gradient shard and freed;
//            this happens for every micro-batch (keeping whole gradients between micro-batches is
//            exactly the memory stage 2 removes). The weights outside the layers (embedding, final
//            norm, head) are reduced in step(): the embedding's gradient arrives last, and when it
//            is tied to the head it arrives twice.
//   stage 3: + weights. Each unit's weights live as this rank's chunk (in the model's dtype) and
//            are all-gathered just before use: a layer before its forward and again before its
//            backward (from a hook on its output, so a recomputed layer has them too), and freed
//            after each (the next layer's gather is started first, so on a GPU it overlaps
//            compute: NCCL runs on its own stream). Embedding, final norm and head are gathered at
//            the start of a forward and freed after the optimizer step. The model reaches the
//            parameters through LayerHooks (core/layer_hooks.h).
//
// Layout. Parameters, in registration order, form units: one per decoder layer ("layers.K.*",
// one per dtype if a layer mixed dtypes) and one per run of the other parameters of one dtype. Unit
// u of n_u elements is cut in S chunks of c_u = ceil(n_u / S); shard s holds chunk s of every unit,
// concatenated (padding zeros where a chunk passes n_u). In the whole unpadded vector of all
// parameters (registration order) unit u starts at o_u, so shard s holds the ranges
// [o_u + s*c_u, o_u + min((s+1)*c_u, n_u)).
//
// Step (every rank, same order): gradient shards summed over ranks (above) and scaled by
// grad_scale -> one global norm (each distinct shard's float64 sum of squares, all-reduced once; an
// inf/NaN anywhere makes it non-finite on every rank, so all skip together) -> clip with the
// replicated optimizer's clip_coefficient -> adamw_step (the one AdamW) on views of the shard, one
// per run of parameters with the same weight-decay rule -> the new weights: stages 1-2 all-gather
// each unit into the parameters, stage 3 keeps its chunk.
//
// Checkpoint. Shard s (one rank per distinct shard) writes master, exp_avg and exp_avg_sq of its
// ranges, unpadded and concatenated, with the ranges in the file's metadata ("ranges": "b:e,...").
// load_shards() takes from any set of such files that covers this rank's ranges the overlapping
// parts, so a checkpoint saved at one (W, S, stage) resumes at any other; stage 1 files written
// before units existed (one range, "begin"/"end") read the same way.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "communicator.h"
#include "fused_adamw.h"
#include "grad_ready_hooks.h"
#include "layer_hooks.h"
#include "safetensors.h"

namespace loom {

struct ZeroStepResult {
  double grad_norm = 0;  // before clipping
  bool skipped = false;  // inf/NaN: no update, step count unchanged
};

// Shard files of one checkpoint (any W/S/stage) gathered into whole flat vectors [numel] fp32 on
// the CPU: what a replicated optimizer needs to resume from a sharded checkpoint. Checks as
// load_shards, and that the files cover [0, numel) exactly once.
struct ZeroFullState {
  torch::Tensor master, exp_avg, exp_avg_sq;
  int64_t updates = 0;
};
ZeroFullState read_zero_shards(const std::vector<std::string>& paths);

class ZeroOptimizer : public LayerHooks {
 public:
  // named: the trainable parameters in registration order; decay[i]: whether named[i] takes weight
  // decay. shards: parallel.zero1 (-1 or 0 = all ranks; must divide the world size). stage: 1-3.
  ZeroOptimizer(Communicator& comm, const std::vector<std::pair<std::string, torch::Tensor>>& named,
                const std::vector<bool>& decay, const OptimizerOptions& opts, int shards, int stage = 1);
  ~ZeroOptimizer() override;
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // The master weights from the parameters as they are now (after a broadcast), unless load_*()
  // set them; then, at stage 3, the parameters are freed: from here on they live in their shards.
  void shard_parameters();

  // After the last backward of a step.
  ZeroStepResult step(double lr, double grad_scale = 1.0);
  void zero_grad();

  // LayerHooks, installed in the model at stage 3 only (hooks() is nullptr otherwise).
  LayerHooks* hooks() { return stage_ == 3 ? this : nullptr; }
  void begin_forward() override;
  void before_layer(int64_t layer) override;
  void after_layer(int64_t layer, const std::vector<torch::Tensor>& outputs) override;

  // The whole parameters, by name, as CPU tensors: every rank must call it (stage 3 gathers each
  // unit, starting the next unit's gather before copying this one's); ranks other than 0 get an
  // empty list. host_for(name, like) gives the CPU tensor to copy parameter `name` into (a
  // page-locked one is filled asynchronously, all copies waited for before returning); without it
  // each is a fresh pageable copy.
  using HostFor = std::function<torch::Tensor(const std::string& name, const torch::Tensor& like)>;
  std::vector<std::pair<std::string, torch::Tensor>> gather_named_parameters(const HostFor& host_for = {});
  // Bytes of parameter storage this rank holds now (the model's tensors and the weight chunks),
  // measured from the storages themselves.
  int64_t resident_parameter_bytes() const;

  int stage() const { return stage_; }
  int shards() const { return shards_; }
  int64_t numel() const { return numel_; }
  size_t num_units() const { return units_.size(); }
  int64_t updates() const { return updates_; }  // successful AdamW steps (t in the bias correction)
  bool writes_shard() const { return comm_.rank() < shards_; }

  // This rank's shard as save_shard writes it: tensors (on the device) and metadata (call only
  // where writes_shard()).
  // When the shard's ranges are contiguous in it (always at S = 1) its tensors are views of the
  // live state, else concatenated copies.
  std::pair<safetensors::NamedTensors, safetensors::Metadata> shard_state() const;
  // shard_state()'s tensors as shapes only (meta tensors): what a save copies, known before it.
  safetensors::NamedTensors shard_layout() const;
  safetensors::WriteResult save_shard(const std::string& path) const;
  // Loads from the shard files of a checkpoint saved at any W/S/stage (every file, in any order).
  void load_shards(const std::vector<std::string>& paths);
  // Loads from whole flat vectors [numel] (fp32, any device): a replicated optimizer's state in
  // this optimizer's parameter order.
  void load_full(const torch::Tensor& master, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                 int64_t updates);

 private:
  struct Unit;
  struct Piece {  // a range of this rank's shard: [global, global + length) of the whole vector
    int64_t global, length, shard_pos;
  };
  std::vector<Piece> pieces() const;
  // The constructor's parts: units_ (and their chunks in the shard vectors), this shard's decay and
  // no-decay runs, and the stage 2/3 gradient hooks.
  void build_units();
  void plan_shard_runs(const std::vector<bool>& decay);
  void install_grad_hooks();
  void master_from_parameters();
  void parameters_from_master();
  // Gradients -> this rank's fp32 gradient shard.
  void launch_reduce(Unit& u, bool release_grads);
  void collect(Unit& u);
  void on_grad_ready(size_t param);
  // Stage 3 weights.
  void prefetch(Unit& u);
  void ensure_gathered(Unit& u);
  void release(Unit& u);
  void pre_backward(int64_t layer);

  Communicator& comm_;
  std::vector<std::pair<std::string, torch::Tensor>> named_;
  OptimizerOptions opts_;
  int stage_ = 1;
  int shards_ = 1, shard_index_ = 0;
  int64_t numel_ = 0, shard_size_ = 0;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<size_t> unit_of_;                     // param -> unit
  std::vector<std::vector<size_t>> layer_units_;    // decoder layer -> its units
  torch::Tensor master_, exp_avg_, exp_avg_sq_;     // [shard_size] fp32
  torch::Tensor grad_;                              // [shard_size] fp32: this rank's gradient sums
  struct Run {
    int64_t begin, length;
  };
  std::vector<Run> decay_runs_, plain_runs_;
  int64_t updates_ = 0;
  bool loaded_ = false;          // load_*() set the master weights
  bool params_sharded_ = false;  // stage 3 after shard_parameters()
  // Stage 2/3 gradient hooks: layer units are reduced in reverse order (the order backward
  // finishes them; every rank launches the same collectives in the same order).
  std::mutex mu_;
  std::vector<bool> seen_;
  std::vector<size_t> reduce_order_;  // layer units, last layer first
  size_t next_reduce_ = 0;
  std::deque<Unit*> in_flight_;
  std::unique_ptr<GradReadyHooks> hooks_;  // stages 2-3: the layers' parameters
};

}  // namespace loom
