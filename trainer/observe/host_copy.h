// A small device tensor's values on the host without stopping the host now (torchtitan reads the
// step's loss only on the steps it logs): start() queues a copy into pinned host memory on the
// current CUDA stream and records an event after it; get() waits for that event only, that is for
// the work queued before the copy, never for what the host queued after it (the update, the next
// step). On the CPU start() copies and get() returns at once.
#pragma once

#include <memory>

#include <torch/torch.h>

namespace loom {

class HostCopy {
 public:
  HostCopy();
  ~HostCopy();
  HostCopy(HostCopy&&) noexcept;
  HostCopy& operator=(HostCopy&&) noexcept;

  void start(const torch::Tensor& t);
  bool started() const { return host_.defined(); }
  // The values, on the CPU, contiguous; waits for the copy the first time.
  const torch::Tensor& get();

 private:
  struct Event;  // CUDA builds: the event after the copy
  torch::Tensor host_;
  std::unique_ptr<Event> event_;
  bool pending_ = false;
};

}  // namespace loom
