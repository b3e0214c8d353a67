// How much memory the process uses: host RSS, and the device allocator's per-step peak.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace loom {

// Peak resident set size of this process in bytes (VmHWM of /proc/self/status); 0 if unknown.
uint64_t peak_rss_bytes();
// Current resident set size (VmRSS).
uint64_t current_rss_bytes();
// Peak memory: on CUDA (LOOM_CUDA builds) the caching allocator's peak allocated bytes since its
// last reset (the loop resets it every step: a per-step peak); elsewhere the peak RSS.
uint64_t peak_memory_bytes(const torch::Device& device);

}  // namespace loom
