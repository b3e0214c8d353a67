// A piece of the run that saves and restores its own part of a checkpoint (torchtitan's Stateful):
// the loop gathers a checkpoint from its pieces instead of assembling it by hand.
#pragma once

#include <string>

#include "checkpoint.h"

namespace loom {

class Stateful {
 public:
  virtual ~Stateful() = default;
  // Adds this piece's part to what rank 0 writes.
  virtual void save_state(CheckpointContents& into) = 0;
  // Restores this piece from a validated step_N folder (every rank reads it).
  virtual void load_state(const std::string& dir) = 0;
};

}  // namespace loom
