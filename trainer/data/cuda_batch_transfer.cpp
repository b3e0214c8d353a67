#include "cuda_batch_transfer.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>

#include "loom/error.h"

namespace loom::cuda {

struct BatchTransfer::Impl {
  torch::Device device;
  c10::cuda::CUDAStream side;
  at::cuda::CUDAEvent copied;
  std::optional<Batch> pending;
  explicit Impl(int d)
      : device(torch::kCUDA, static_cast<c10::DeviceIndex>(d)),
        side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, static_cast<c10::DeviceIndex>(d))) {}
};

BatchTransfer::BatchTransfer(int device) : impl_(std::make_unique<Impl>(device)) {}
BatchTransfer::~BatchTransfer() = default;

void BatchTransfer::start(const Batch& b) {
  // pin_memory() copies into the caching host allocator, which keeps each block until the copy
  // that reads it has finished on the device; the pinned tensors may then go out of scope.
  const auto pin = [](const torch::Tensor& t) { return t.defined() && t.is_cpu() ? t.pin_memory() : t; };
  Batch pinned = b;
  pinned.tokens = pin(b.tokens);
  pinned.labels = pin(b.labels);
  pinned.positions = pin(b.positions);
  pinned.segments = pin(b.segments);
  pinned.cu_seqlens = pin(b.cu_seqlens);
  if (b.dataset_ids.defined()) pinned.dataset_ids = pin(b.dataset_ids);
  c10::cuda::CUDAStreamGuard guard(impl_->side);
  Batch on_device = pinned;
  on_device.tokens = pinned.tokens.to(impl_->device, /*non_blocking=*/true);
  on_device.labels = pinned.labels.to(impl_->device, true);
  on_device.positions = pinned.positions.to(impl_->device, true);
  on_device.segments = pinned.segments.to(impl_->device, true);
  on_device.cu_seqlens = pinned.cu_seqlens.to(impl_->device, true);
  if (b.cu_seqlens.is_cpu()) on_device.cu_seqlens_host = b.cu_seqlens;  // as Batch::to keeps it
  if (pinned.dataset_ids.defined()) on_device.dataset_ids = pinned.dataset_ids.to(impl_->device, true);
  impl_->copied.record(impl_->side);
  impl_->pending = std::move(on_device);
}

Batch BatchTransfer::finish() {
  LOOM_ASSERT(impl_->pending.has_value(), "BatchTransfer::finish() without start()");
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(impl_->device.index());
  impl_->copied.block(current);
  Batch b = std::move(*impl_->pending);
  impl_->pending.reset();
  // The tensors were allocated on the side stream but are used (and freed) on the current one.
  for (const torch::Tensor* t : {&b.tokens, &b.labels, &b.positions, &b.segments, &b.cu_seqlens, &b.dataset_ids}) {
    if (t->defined()) c10::cuda::CUDACachingAllocator::recordStream(t->storage().data_ptr(), current);
  }
  return b;
}

}  // namespace loom::cuda
