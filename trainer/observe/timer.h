// A wall-clock accumulator for the split of a step (forward/backward, optimizer, data wait).
#pragma once

#include <chrono>

namespace loom {

// Accumulates seconds between start() and stop() calls.
class Timer {
 public:
  void start() { t0_ = std::chrono::steady_clock::now(); }
  void stop() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  double seconds() const { return total_; }
  void reset() { total_ = 0; }

 private:
  std::chrono::steady_clock::time_point t0_;
  double total_ = 0;
};

}  // namespace loom
