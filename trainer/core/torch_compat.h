// The one place where LibTorch 1.13 (Debian, CPU) and 2.x (the CUDA image) differ for loom.
#pragma once

#include <torch/torch.h>

#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
#define LOOM_TORCH2 1
#else
#define LOOM_TORCH2 0
#endif

namespace loom::compat {

// The default random generator of a device (CPU, or the CUDA device's own). Same call in 1.13 and
// 2.x; goes through at::globalContext() so a CPU-only build needs no CUDA header.
inline at::Generator default_generator(const torch::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

// A generator's full state as a CPU byte tensor (a copy), and back. Locks the generator as
// ATen asks of every caller.
inline torch::Tensor get_rng_state(const torch::Device& device) {
  at::Generator gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
inline void set_rng_state(const torch::Device& device, const torch::Tensor& state) {
  at::Generator gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace loom::compat

// ---- distributed (owned by DIST: trainer/parallel/communicator.cpp is the only user) ----
// c10d's common base of ProcessGroupGloo and ProcessGroupNCCL: ProcessGroup in 1.13, Backend in 2.x
// (2.x's ProcessGroup became a dispatcher over backends). Both expose the same collectives.
#ifdef LOOM_COMPAT_C10D
#if LOOM_TORCH2
#include <torch/csrc/distributed/c10d/Backend.hpp>
namespace loom::compat {
using CommBackend = c10d::Backend;
}  // namespace loom::compat
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
namespace loom::compat {
using CommBackend = c10d::ProcessGroup;
}  // namespace loom::compat
#endif
#endif  // LOOM_COMPAT_C10D

// ---- profiler (trainer/observe/profiling.cpp is the only user) ----
// 2.x images have Kineto, whose ProfilerResult::save writes CPU and CUDA activity. Debian's 1.13 is
// built without it (save() refuses), so there loom records with the legacy autograd profiler
// (enableProfilerLegacy/disableProfilerLegacy, CPU ops; still in 2.11) and writes the trace itself.
// Both APIs take torch::profiler::impl::ProfilerConfig in 1.13 and 2.x.
#ifdef LOOM_COMPAT_PROFILER
#include <torch/csrc/autograd/profiler.h>
namespace loom::compat {
constexpr bool kProfilerKineto = LOOM_TORCH2;
}  // namespace loom::compat
#endif  // LOOM_COMPAT_PROFILER
