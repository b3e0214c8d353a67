#include "host_copy.h"

#include "loom/error.h"

#ifdef LOOM_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace loom {

#ifdef LOOM_CUDA
struct HostCopy::Event {
  at::cuda::CUDAEvent done;
};
#else
struct HostCopy::Event {};
#endif

HostCopy::HostCopy() = default;
HostCopy::~HostCopy() = default;
HostCopy::HostCopy(HostCopy&&) noexcept = default;
HostCopy& HostCopy::operator=(HostCopy&&) noexcept = default;

void HostCopy::start(const torch::Tensor& t) {
  LOOM_ASSERT(t.defined(), "HostCopy: an undefined tensor");
#ifdef LOOM_CUDA
  if (t.is_cuda()) {
    // The caching host allocator keeps the pinned block until the copy into it has run.
    host_ = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
    host_.copy_(t, /*non_blocking=*/true);
    if (!event_) event_ = std::make_unique<Event>();
    event_->done.record(c10::cuda::getCurrentCUDAStream(t.device().index()));
    pending_ = true;
    return;
  }
#endif
  host_ = t.to(torch::kCPU).contiguous();
  pending_ = false;
}

const torch::Tensor& HostCopy::get() {
  LOOM_ASSERT(host_.defined(), "HostCopy::get() before start()");
#ifdef LOOM_CUDA
  if (pending_) event_->done.synchronize();
#endif
  pending_ = false;
  return host_;
}

}  // namespace loom
