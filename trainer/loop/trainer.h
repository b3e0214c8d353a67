// The train/eval loop: composes the data (TrainData, Loader, ValidationSets), the model and loss,
// the Optimizer and LrSchedule, the CheckpointSaver and the metrics sinks (metrics.h). Each piece
// lives in its own folder (docs/ARCHITECTURE.md); the Loop (loop.h) only orders them: Loop::start
// names each start-up phase, Loop::run each stage of a step; the debug.* faults are played at named
// points by FaultInjector:
//
//   start: index the data (its summary logged) -> plan memory and choose attention -> build the
//          model, then the update -> resume (--resume auto|DIR) or init (--init-from DIR) -> open the
//          checkpoint saver and the metrics sinks (Loop::start, trainer.cpp)
//   step:  M micro-batches: forward, loss_sum / tokens of the global batch, backward
//          -> (skip_batches: no update) -> grad norm -> inf/NaN: skip, else clip + AdamW at lr(updates)
//          -> metrics every job.log_every -> validation every data.valid_every
//          -> checkpoint every ckpt.checkpoint_every, or at once after SIGTERM/SIGINT (then exit 0)
//   end:   checkpoint, then validation, of the last step; summary line
#pragma once

#include <functional>
#include <memory>

#include "config.h"

namespace loom {

struct TrainSummary {
  int64_t steps_done = 0;        // steps run by this process
  int64_t final_step = 0;
  double last_loss = 0;
  bool stopped_by_signal = false;
  std::string last_checkpoint;   // "" if none was written
};

// Sets a fresh run's weights from outside loom's checkpoints (main.cpp passes --init-from-hf's
// importer, so the loop does not depend on hf/). Not called when the run resumes or --init-from.
using WeightInit = std::function<void(InternLMImpl& model)>;

TrainSummary train(const TrainConfig& config, const WeightInit& init_weights = {});

}  // namespace loom
