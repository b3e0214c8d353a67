// The counters of a run that a checkpoint restores (state.json), besides tensors: where the loop,
// the schedule and the data stand, and the RNG state. JSON so a human (or jq) can read it.
#pragma once

#include <cstdint>
#include <string>

#include "sampler.h"

namespace loom {

inline constexpr int64_t kTrainStateVersion = 1;

struct TrainState {
  int64_t step = 0;                 // steps done (global batches consumed, skipped ones included)
  int64_t updates = 0;              // successful optimizer updates: the LR schedule's clock
  uint64_t consumed_tokens = 0;     // real (non-padding) tokens over all ranks
  int64_t inf_nan_skips = 0;        // updates skipped for inf/NaN gradients (InternLM's inf_nan_skip_batches)
  int64_t skipped_batches = 0;      // steps skipped by data.skip_batches
  int64_t spike_skips = 0;          // updates skipped as loss spikes (monitor.skip_spike_batches)
  std::string spike_json = "{}";    // the spike detector's state (spike_detector.h), a JSON object
  SamplerState sampler;             // consumed_samples is the global data position
  int64_t world_size = 1;           // at save time (informative: a resume may change it)
  std::string cpu_rng_state_hex;    // torch's default CPU generator state bytes
  std::string data_json;            // what the run trained on (data_manifest.h), a JSON object; "" = not recorded

  std::string to_json() const;
  // Throws loom::Error naming `where` for malformed JSON, a missing key or an unknown version.
  // spike_skips, spike and data (added within version 1) may be absent: zero, an empty detector, "".
  static TrainState from_json(const std::string& json, const std::string& where);
};

std::string to_hex(const void* data, size_t n);
std::string from_hex(const std::string& hex, const std::string& where);

}  // namespace loom
