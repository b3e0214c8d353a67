// The memory plan of a parsed configuration, and `loom-train plan`:
//   loom-train plan --config F.ini [--section.key=value ...] [--world-size W] [--device-memory-gib G] [--json]
// It allocates no tensor and needs no GPU: the device's memory is --device-memory-gib, else the
// visible GPU's (CUDA builds), else this host's RAM for job.device=cpu.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config.h"
#include "memory_plan.h"

namespace loom {

// The attention kernel a run of this device kind, dtype and job.attention will use, as
// select_attention() would choose it where flash attention is built (LibTorch 2.x). auto on CUDA
// is planned as flash: the cuDNN kernel auto takes on Hopper keeps the same bytes.
AttentionKernel expected_attention(bool cuda, torch::Dtype dtype, int64_t head_dim, AttentionChoice choice);

// The plan's inputs for config c at world size W on devices of device_bytes each. With
// model.checkpoint=auto the fraction is left at c.model.checkpoint (resolve it with
// auto_checkpoint_fraction).
PlanInputs plan_inputs(const TrainConfig& c, int64_t world_size, uint64_t device_bytes);

// Physical memory of this host (sysconf), bytes.
uint64_t host_memory_bytes();

// The plan loom-train checks at start: one rank of `world_size` on `device` (its total memory; host
// RAM for the CPU). model.checkpoint=auto is resolved into the returned plan's model options.
MemoryPlan plan_for_run(const TrainConfig& c, int64_t world_size, const torch::Device& device);

int run_plan(const std::vector<std::string>& args);

}  // namespace loom
