// The CUDA caching allocator's view of device memory, for loom-train's per-step peak report,
// --profile-memory and out-of-memory messages. LOOM_CUDA builds only (compiled into loom_trainer
// by trainer/cuda/CMakeLists.txt; callers test LOOM_CUDA_KERNELS).
#pragma once

#include <cstdint>
#include <string>

namespace loom::cuda {

struct MemoryStats {
  int64_t allocated = 0, reserved = 0;            // bytes held by tensors / by the allocator now
  int64_t peak_allocated = 0, peak_reserved = 0;  // since the last reset_peak_memory()
  int64_t device_free = 0, device_total = 0;      // cudaMemGetInfo: the whole device
};

MemoryStats memory_stats(int device);
void reset_peak_memory(int device);
// "allocated 12.3 GiB (peak 40.1), reserved 44.0 GiB (peak 44.0), device free 90.2 of 139.8 GiB"
std::string describe(const MemoryStats& s);

}  // namespace loom::cuda
