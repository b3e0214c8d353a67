// What the loop measures about itself: wall-clock split of a step, and memory.
#pragma once

#include <chrono>
#include <cstdint>

#include <torch/torch.h>

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

// Peak resident set size of this process in bytes (VmHWM of /proc/self/status); 0 if unknown.
uint64_t peak_rss_bytes();
// Current resident set size (VmRSS).
uint64_t current_rss_bytes();
// Peak memory: on CUDA (LOOM_CUDA builds) the caching allocator's peak allocated bytes since its
// last reset (the loop resets it every step: a per-step peak); elsewhere the peak RSS.
uint64_t peak_memory_bytes(const torch::Device& device);

}  // namespace loom
