// Loss-spike detection (monitor.spike_ratio, monitor.spike_window, monitor.skip_spike_batches).
//
// The reference is the median of the last `window` accepted losses (robust to the spikes it judges,
// unlike an EMA that a single spike drags up). A loss is a spike when it is NaN/inf (always, warm-up
// included) or, once `window` losses have been accepted, when loss > ratio * reference.
// Accepted: every finite loss that is not a spike, and a spike too unless exclude_spikes (the loop
// sets it with monitor.skip_spike_batches: a skipped update's loss is not part of the trajectory).
// A level shift would otherwise make every later step a skipped "spike": after `window` spikes in a
// row the window is cleared and the detector warms up again from the new level (verdict.rebased).
//
// The whole state is a small JSON text (state.json can hold it), with losses printed to 17
// significant digits, so a resumed run takes bitwise the same decisions.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

namespace loom {

struct SpikeOptions {
  double ratio = 0;          // monitor.spike_ratio (0 = off); > 1 when on
  int64_t window = 50;       // monitor.spike_window: losses in the reference, and the warm-up length
  bool exclude_spikes = false;  // monitor.skip_spike_batches
};

struct SpikeVerdict {
  bool is_spike = false;
  bool warming_up = false;  // fewer than `window` accepted losses: only NaN/inf are judged
  bool rebased = false;     // this spike completed a run of `window`: the reference starts over
  double reference = 0;     // the median the loss was compared with (0 while warming up)
  double ratio = 0;         // loss / reference (0 while warming up or when reference is 0)
};

class SpikeDetector {
 public:
  explicit SpikeDetector(SpikeOptions o);
  bool enabled() const { return o_.ratio > 0; }

  // Judges the loss of step `step` and updates the state. Steps must increase; a repeated or older
  // step (a replay after resume) is judged but does not change the state.
  SpikeVerdict observe(int64_t step, double loss);
  double reference() const;  // current median (0 while warming up)

  std::string to_json() const;
  // Restores a state written by to_json(); throws loom::Error on malformed text. If the window
  // option changed since, the newest min(old, new) losses are kept.
  void from_json(const std::string& text);

  const SpikeOptions& options() const { return o_; }
  int64_t spikes() const { return spikes_; }

 private:
  SpikeOptions o_;
  std::deque<double> losses_;  // accepted, oldest first, at most `window`
  int64_t consecutive_ = 0;    // spikes in a row
  int64_t spikes_ = 0;         // total
  int64_t last_step_ = -1;
};

}  // namespace loom
