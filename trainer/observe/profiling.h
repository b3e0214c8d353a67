// --profiling: LibTorch's profiler over a few steps, saved as a chrome trace ({"traceEvents": [...]})
// that chrome://tracing and Perfetto open. Records steps [kFirst, kFirst + kSteps) of this process
// (after warm-up), or fewer if the run is shorter; each recorded step is one "ProfilerStep#i" range,
// i counted from this process's first step. Where the trace comes from depends on the LibTorch:
//   2.x (Kineto): CPU ops, and CUDA kernels when CUDA is present; Kineto writes the file.
//   1.13 as Debian builds it (no Kineto): the legacy autograd profiler records the CPU ops on the
//   loop's thread (intra-op work shows inside its op) and loom writes the file.
// If profiling is impossible, it says so in one warning and the run goes on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace at {
struct RecordFunction;
}  // namespace at

namespace loom {

// A named range in the trace ("data", "forward_backward", ...): from construction to end() or
// destruction. When no profiler records, it costs one thread-local check.
class ProfileRange {
 public:
  explicit ProfileRange(const std::string& name);
  ~ProfileRange();
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;
  void end();

 private:
  std::unique_ptr<at::RecordFunction> rf_;
};

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
  void start();
  void write_trace();
  bool enabled_;
  bool active_ = false;
  bool kineto_ = false;  // which profiler recorded (compat::kProfilerKineto when started)
  std::string path_;
  std::unique_ptr<ProfileRange> step_range_;
};

}  // namespace loom
