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

// The plan's inputs for config c at world size W on devices of device_bytes each, with the
// attention kernel choose_attention() picks from caps (what the run installs). With
// model.checkpoint=auto the fraction is left at c.model.checkpoint (resolve it with
// auto_checkpoint_fraction).
PlanInputs plan_inputs(const TrainConfig& c, int64_t world_size, uint64_t device_bytes, const AttentionCaps& caps);

// Whether config c asks for the FP8 weight cache (ModelOptions::fp8_weight_cache): FP8 with several
// micro-batches a step and the replicated optimizer, the only one that publishes its weights'
// maxima, which the cache needs. plan_for_device may still leave it off.
bool fp8_weight_cache_wanted(const TrainConfig& c);

// The plan of config c for one rank of `world` on a device of device_bytes: model.checkpoint=auto
// resolved into the returned plan's model options, and the FP8 weight cache (plan_inputs turns it
// on for several micro-batches a step) left off where it would add recomputed layers or make the
// run not fit.
MemoryPlan plan_for_device(const TrainConfig& c, int64_t world, uint64_t device_bytes, const AttentionCaps& caps);

// Physical memory of this host (sysconf), bytes.
uint64_t host_memory_bytes();

// The plan loom-train checks at start: one rank of `world_size` on `device` (its total memory; host
// RAM for the CPU) whose kernels are caps. model.checkpoint=auto is resolved into the returned
// plan's model options; in.attention is the kernel the run installs.
MemoryPlan plan_for_run(const TrainConfig& c, int64_t world_size, const torch::Device& device, const AttentionCaps& caps);

int run_plan(const std::vector<std::string>& args);

}  // namespace loom
