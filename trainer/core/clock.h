// Seconds on the steady clock since a point, for the log lines that time a phase.
#pragma once

#include <chrono>

namespace loom {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace loom
