#include "timer.h"

#include <vector>

#include "loom/error.h"

#ifdef LOOM_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace loom {

#ifdef LOOM_CUDA
struct DeviceTimer::Events {
  struct Interval {
    at::cuda::CUDAEvent begin{cudaEventDefault}, end{cudaEventDefault};  // timing enabled
  };
  std::vector<std::unique_ptr<Interval>> intervals;  // reused after reset(): events are created once
  size_t used = 0;
  bool open = false;
};
#else
struct DeviceTimer::Events {};
#endif

DeviceTimer::DeviceTimer(int cuda_device) : cuda_device_(cuda_device) {
#ifdef LOOM_CUDA
  if (cuda_device_ >= 0) events_ = std::make_unique<Events>();
#else
  LOOM_ASSERT(cuda_device_ < 0, "a CUDA timer in a build without CUDA");
#endif
}

DeviceTimer::~DeviceTimer() = default;

void DeviceTimer::start() {
#ifdef LOOM_CUDA
  if (events_) {
    Events& e = *events_;
    LOOM_ASSERT(!e.open, "DeviceTimer::start() twice without stop()");
    if (e.used == e.intervals.size()) e.intervals.push_back(std::make_unique<Events::Interval>());
    e.intervals[e.used]->begin.record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(cuda_device_)));
    e.open = true;
    return;
  }
#endif
  host_.start();
}

void DeviceTimer::stop() {
#ifdef LOOM_CUDA
  if (events_) {
    Events& e = *events_;
    LOOM_ASSERT(e.open, "DeviceTimer::stop() without start()");
    e.intervals[e.used]->end.record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(cuda_device_)));
    ++e.used;
    e.open = false;
    return;
  }
#endif
  host_.stop();
}

double DeviceTimer::seconds() const {
#ifdef LOOM_CUDA
  if (events_) {
    double ms = 0;
    for (size_t i = 0; i < events_->used; ++i) {
      Events::Interval& in = *events_->intervals[i];
      in.end.synchronize();
      ms += in.begin.elapsed_time(in.end);
    }
    return ms / 1000.0;
  }
#endif
  return host_.seconds();
}

void DeviceTimer::reset() {
#ifdef LOOM_CUDA
  if (events_) {
    events_->used = 0;
    events_->open = false;
    return;
  }
#endif
  host_.reset();
}

}  // namespace loom
