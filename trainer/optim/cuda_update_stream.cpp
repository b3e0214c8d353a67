#include "cuda_update_stream.h"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>

namespace loom::cuda {

struct UpdateStream::Impl {
  c10::DeviceIndex device;
  c10::cuda::CUDAStream side;
  at::cuda::CUDAEvent ready;          // the gradients are final (the caller's stream)
  std::vector<at::cuda::CUDAEvent> done;  // unit u's update has run (the side stream)
  std::vector<char> pending;          // done[u] recorded and not yet waited on by `consumer`
  c10::cuda::CUDAStream consumer;     // the stream run() was called from (the training stream)
  Impl(int d, int64_t units)
      : device(static_cast<c10::DeviceIndex>(d)),
        side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)),
        done(static_cast<size_t>(units)),
        pending(static_cast<size_t>(units), 0),
        consumer(c10::cuda::getCurrentCUDAStream(device)) {}
};

UpdateStream::UpdateStream(int device, int64_t num_layers)
    : impl_(std::make_unique<Impl>(device, num_layers + 1)) {}

UpdateStream::~UpdateStream() = default;

void UpdateStream::run(const std::function<void(int64_t unit)>& update) {
  Impl& m = *impl_;
  // A unit still pending from the last run (a step without a forward in between, e.g. a skipped
  // batch) keeps its order: the side stream runs its work in order anyway.
  m.consumer = c10::cuda::getCurrentCUDAStream(m.device);
  m.ready.record(m.consumer);
  m.ready.block(m.side);
  c10::cuda::CUDAStreamGuard guard(m.side);
  if (delay_cycles_ > 0) at::cuda::sleep(delay_cycles_);
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
  // A layer past the last one with trainable weights has no unit: nothing updates it.
  if (unit < 0 || static_cast<size_t>(unit) >= m.done.size()) return;
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(m.device);
  // `pending` speaks for the consumer stream only; another stream waits on the event every time
  // (cheap once it has completed).
  if (current != m.consumer) {
    m.done[unit].block(current);
    return;
  }
  if (!m.pending[unit]) return;
  m.done[unit].block(current);
  m.pending[unit] = 0;
}

void UpdateStream::settle() const {
  for (size_t u = 0; u < impl_->done.size(); ++u) wait(static_cast<int64_t>(u));
  impl_->side.synchronize();
}

void UpdateStream::begin_forward() { wait(0); }

void UpdateStream::before_layer(int64_t layer) { wait(layer + 1); }

}  // namespace loom::cuda
