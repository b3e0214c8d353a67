#include "cuda_update_stream.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>

#include "loom/error.h"

namespace loom::cuda {

struct UpdateStream::Impl {
  c10::DeviceIndex device;
  c10::cuda::CUDAStream side;
  at::cuda::CUDAEvent ready;          // the gradients are final (the caller's stream)
  std::vector<at::cuda::CUDAEvent> done;  // unit u's update has run (the side stream)
  std::vector<char> pending;          // done[u] recorded and not yet waited on by the caller's stream
  Impl(int d, int64_t units)
      : device(static_cast<c10::DeviceIndex>(d)),
        side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)),
        done(static_cast<size_t>(units)),
        pending(static_cast<size_t>(units), 0) {}
};

UpdateStream::UpdateStream(int device, int64_t num_layers)
    : impl_(std::make_unique<Impl>(device, num_layers + 1)) {}

UpdateStream::~UpdateStream() = default;

void UpdateStream::run(const std::function<void(int64_t unit)>& update) {
  Impl& m = *impl_;
  // A unit still pending from the last run (a step without a forward in between, e.g. a skipped
  // batch) keeps its order: the side stream runs its work in order anyway.
  m.ready.record(c10::cuda::getCurrentCUDAStream(m.device));
  m.ready.block(m.side);
  c10::cuda::CUDAStreamGuard guard(m.side);
  for (size_t u = 0; u < m.done.size(); ++u) {
    update(static_cast<int64_t>(u));
    m.done[u].record(m.side);
    m.pending[u] = 1;
  }
}

void UpdateStream::keep_until_done(const torch::Tensor& t) {
  c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), impl_->side);
}

void UpdateStream::wait(int64_t unit) const {
  Impl& m = *impl_;
  LOOM_ASSERT(unit >= 0 && static_cast<size_t>(unit) < m.done.size(), "UpdateStream: unit ", unit, " of ",
              m.done.size());
  if (!m.pending[unit]) return;
  m.done[unit].block(c10::cuda::getCurrentCUDAStream(m.device));
  m.pending[unit] = 0;
}

void UpdateStream::settle() const {
  for (size_t u = 0; u < impl_->done.size(); ++u) wait(static_cast<int64_t>(u));
  impl_->side.synchronize();
}

void UpdateStream::begin_forward() { wait(0); }

void UpdateStream::before_layer(int64_t layer) { wait(layer + 1); }

}  // namespace loom::cuda
