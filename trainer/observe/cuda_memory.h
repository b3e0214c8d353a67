// The CUDA caching allocator's view of device memory, for loom-train's per-step peak report,
// --profile-memory and out-of-memory messages. LOOM_CUDA builds only (callers test LOOM_CUDA_KERNELS).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace loom::cuda {

struct MemoryStats {
  int64_t allocated = 0, reserved = 0;            // bytes held by tensors / by the allocator now
  int64_t peak_allocated = 0, peak_reserved = 0;  // since the last reset_peak_memory()
  int64_t device_free = 0, device_total = 0;      // cudaMemGetInfo: the whole device
};

MemoryStats memory_stats(int device);
// The device's name as the driver reports it ("NVIDIA H100 80GB HBM3").
std::string device_name(int device);
void reset_peak_memory(int device);
// "allocated 12.3 GiB (peak 40.1), reserved 44.0 GiB (peak 44.0), device free 90.2 of 139.8 GiB"
std::string describe(const MemoryStats& s);

// Where a training step's device memory goes (--profile-memory, and the out-of-memory report):
// bytes held by the parameters, their gradients and the optimizer state (fp32 master weights and
// moments), measured from the tensors; activations and temporaries = the step's allocator peak
// minus those three (what the forward keeps for the backward, plus workspaces).
struct MemoryBreakdown {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, activations_peak = 0;
  MemoryStats stats;
  // The gradients exist only from the backward to the update (released after it, CUDA's replicated
  // optimizer): at the peak some of them may not, so activations_peak is the peak minus parameters
  // and optimizer state, gradients made so far included.
  bool gradients_transient = false;
};
// Bytes of the distinct storages behind tensors (views of one storage count once; undefined skipped).
int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors);
MemoryBreakdown memory_breakdown(int device, const std::vector<torch::Tensor>& parameters,
                                 const std::vector<torch::Tensor>& gradients,
                                 const std::vector<torch::Tensor>& optimizer_state, bool gradients_transient = false);
std::string describe(const MemoryBreakdown& b);  // one line, GiB
std::string to_json(const MemoryBreakdown& b);   // one JSON object, bytes

}  // namespace loom::cuda
