// Accumulators for the split of a step (forward/backward, optimizer, data wait).
#pragma once

#include <chrono>
#include <memory>

namespace loom {

// Accumulates host wall-clock seconds between start() and stop() calls.
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

// The same for work that runs on a device. On a CUDA device (LOOM_CUDA builds) start() and stop()
// record CUDA events on the device's current stream, so the interval is the device's time for the
// work queued between them: a host clock stops when the launches return, long before the kernels
// end, and then the split does not add up to the step. seconds() waits for the last stop event.
// On the CPU (cuda_device < 0) it is a Timer.
class DeviceTimer {
 public:
  explicit DeviceTimer(int cuda_device = -1);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  void start();
  void stop();
  double seconds() const;
  void reset();

 private:
  struct Events;  // the CUDA events of the intervals since reset()
  int cuda_device_;
  Timer host_;
  std::unique_ptr<Events> events_;
};

}  // namespace loom
