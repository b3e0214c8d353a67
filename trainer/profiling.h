// --profiling: LibTorch's (Kineto) profiler over a few steps, saved as a chrome trace that
// chrome://tracing and Perfetto open. Records steps [kFirst, kFirst + kSteps) of the run (after
// warm-up), or fewer if the run is shorter. If this LibTorch build cannot profile, it says so once
// and the run goes on.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

class Profiler {
 public:
  static constexpr int64_t kFirst = 2, kSteps = 3;
  Profiler(bool enabled, std::string trace_path);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  // i: steps run so far by this process.
  void on_step_begin(int64_t i);
  // Stops and writes the trace if recording.
  void finish();

 private:
  bool enabled_;
  bool active_ = false;
  std::string path_;
};

}  // namespace loom
