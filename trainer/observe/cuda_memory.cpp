#include "cuda_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include <torch/torch.h>

#include "loom/error.h"

namespace loom::cuda {
namespace {
// StatType::AGGREGATE: the first entry of every StatArray (the enum's namespace moved between
// LibTorch releases; its position did not).
constexpr size_t kAggregate = 0;

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// The allocator creates its per-device state lazily, at the first allocation: before that its
// statistics calls reject the device. A one-element tensor (a cached block) makes sure it exists.
void ensure_allocator(int device) {
  (void)torch::empty({1}, torch::dtype(torch::kUInt8).device(torch::kCUDA, static_cast<c10::DeviceIndex>(device)));
}
}  // namespace

MemoryStats memory_stats(int device) {
  ensure_allocator(device);
  const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  MemoryStats s;
  s.allocated = st.allocated_bytes[kAggregate].current;
  s.peak_allocated = st.allocated_bytes[kAggregate].peak;
  s.reserved = st.reserved_bytes[kAggregate].current;
  s.peak_reserved = st.reserved_bytes[kAggregate].peak;
  size_t free_bytes = 0, total_bytes = 0;
  int previous = 0;
  cudaGetDevice(&previous);
  if (cudaSetDevice(device) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    s.device_free = static_cast<int64_t>(free_bytes);
    s.device_total = static_cast<int64_t>(total_bytes);
  }
  cudaSetDevice(previous);
  return s;
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  // An unknown name only costs the MFU field (device_peak.h): no error to raise here.
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "";
  return p.name;
}

void reset_peak_memory(int device) {
  ensure_allocator(device);
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

std::string describe(const MemoryStats& s) {
  return str("allocated ", gib(s.allocated), " GiB (peak ", gib(s.peak_allocated), "), reserved ", gib(s.reserved),
             " GiB (peak ", gib(s.peak_reserved), "), device free ", gib(s.device_free), " of ", gib(s.device_total),
             " GiB");
}

int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors) {
  std::set<const void*> seen;
  int64_t total = 0;
  for (const torch::Tensor& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    if (seen.insert(t.storage().data()).second) total += static_cast<int64_t>(t.storage().nbytes());
  }
  return total;
}

MemoryBreakdown memory_breakdown(int device, const std::vector<torch::Tensor>& parameters,
                                 const std::vector<torch::Tensor>& gradients,
                                 const std::vector<torch::Tensor>& optimizer_state, bool gradients_transient) {
  MemoryBreakdown b;
  b.parameters = tensor_bytes(parameters);
  b.gradients = tensor_bytes(gradients);
  b.optimizer_state = tensor_bytes(optimizer_state);
  b.stats = memory_stats(device);
  b.gradients_transient = gradients_transient;
  const int64_t resident = b.parameters + b.optimizer_state + (gradients_transient ? 0 : b.gradients);
  b.activations_peak = std::max<int64_t>(0, b.stats.peak_allocated - resident);
  return b;
}

std::string describe(const MemoryBreakdown& b) {
  return str("parameters ", gib(b.parameters), " GiB, gradients ", gib(b.gradients),
             b.gradients_transient ? " GiB (from the backward to the update)" : " GiB", ", optimizer state ",
             gib(b.optimizer_state), " GiB, activations and temporaries at peak ", gib(b.activations_peak),
             b.gradients_transient ? " GiB (with the gradients made by then); " : " GiB; ", describe(b.stats));
}

std::string to_json(const MemoryBreakdown& b) {
  return str("{\"parameters\": ", b.parameters, ", \"gradients\": ", b.gradients, ", \"optimizer_state\": ",
             b.optimizer_state, ", \"gradients_transient\": ", b.gradients_transient ? "true" : "false",
             ", \"activations_peak\": ", b.activations_peak, ", \"peak_allocated\": ",
             b.stats.peak_allocated, ", \"peak_reserved\": ", b.stats.peak_reserved, ", \"device_free\": ",
             b.stats.device_free, ", \"device_total\": ", b.stats.device_total, "}");
}

}  // namespace loom::cuda
