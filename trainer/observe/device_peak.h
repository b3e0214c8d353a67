// The peak a figure of utilisation is measured against: the dense (no sparsity) bf16 tensor-core
// TFLOP/s of one GPU, from NVIDIA's datasheets, by the name the driver reports. FP8 runs are
// measured against the same bf16 peak (their MFU may then read above what bf16 could reach).
#pragma once

#include <string>

namespace loom {

// 0 when the name is not one of the known GPUs (job.peak_tflops then has to say it).
double known_bf16_peak_tflops(const std::string& gpu_name);

}  // namespace loom
