// The loop's pieces that a checkpoint holds besides the model (ModuleState, model_state.h), as
// checkpoint components: the optimizer's update and the run's counters with the data position,
// the spike detector and the RNG (state.json).
#pragma once

#include <string>

#include "data_parallel.h"
#include "loader.h"
#include "spike_detector.h"
#include "stateful.h"
#include "train_state.h"

namespace loom {

// Throws loom::Error when dir's state.json does not parse or its step is not `step` (the
// checkpoint's manifest and folder name): such a folder would resume at another step than it says.
void check_state_step(const std::string& dir, int64_t step);

// optimizer.safetensors when the optimizer state is replicated; with ZeRO-1 each shard's rank
// writes its own file during the save, and load_state reads either kind.
class OptimizerState : public Stateful {
 public:
  explicit OptimizerState(DataParallelUpdate& update) : update_(update) {}
  void save_state(CheckpointContents& into) override { into.optimizer = update_.replicated_state(); }
  void load_state(const std::string& dir) override { update_.load(dir); }  // after the model's weights

 private:
  DataParallelUpdate& update_;
};

// state.json: the TrainState counters, the sampler, the spike detector and torch's CPU RNG.
class RunState : public Stateful {
 public:
  RunState(TrainState& state, Loader& loader, SpikeDetector& spike, const DataParallelUpdate& update, int world_size)
      : state_(state), loader_(loader), spike_(spike), update_(update), world_size_(world_size) {}
  void save_state(CheckpointContents& into) override;
  void load_state(const std::string& dir) override;

 private:
  TrainState& state_;
  Loader& loader_;
  SpikeDetector& spike_;
  const DataParallelUpdate& update_;
  int world_size_;
};

}  // namespace loom
