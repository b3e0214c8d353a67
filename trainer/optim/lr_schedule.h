// Learning rate as a closed-form function of the number of successful updates e (skipped updates do
// not advance it), so a resume needs only e. InternLM's warmup + cosine:
//   Wst = int(total_steps * warmup_ratio) (or warmup_steps when >= 0), W = init_steps + Wst
//   lr(e) = 0                                                          e < init_steps
//         = base * (e + 1 - init_steps) / Wst                          e < W
//         = eta_min + (base - eta_min) * (1 + cos(pi * (e - W) / (total_steps - W))) / 2
// "constant" gives base for every e (after the same warmup). "wsd" (warmup-stable-decay) holds base
// until the last int(total_steps * decay_ratio) updates, then falls linearly to eta_min:
//   D = total_steps - int(total_steps * decay_ratio)
//   lr(e) = base                                                       W <= e < D
//         = base + (eta_min - base) * (e + 1 - D) / (total_steps - D)  D <= e < total_steps
//         = eta_min                                                    e >= total_steps
// The schedule a run meant to be extended uses: raising total_steps before the decay starts
// changes no learning rate already taken or about to be taken.
#pragma once

#include <cstdint>
#include <string>

#include "optim_options.h"

namespace loom {

// [lr_scheduler] (optim_options.h, where its defaults are) with the two keys of other sections it
// needs, assembled by TrainConfig::lr_schedule_options().
struct LrScheduleOptions : LrSchedulerOptions {
  double base_lr = AdamOptions{}.lr;  // adam.lr
  // data.total_steps. Its default is [data]'s (dataset.h), which optim/ does not see: callers set
  // it; 1 only keeps a default-constructed schedule valid.
  int64_t total_steps = 1;

  bool operator==(const LrScheduleOptions& o) const;
  bool operator!=(const LrScheduleOptions& o) const { return !(*this == o); }
  // "key: a -> b" for each key that differs from o (config key names), "; "-joined.
  std::string differences(const LrScheduleOptions& o) const;
};

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleOptions& o);
  double lr(int64_t updates) const;
  int64_t warmup_end() const { return warmup_end_; }
  const LrScheduleOptions& options() const { return o_; }

 private:
  LrScheduleOptions o_;
  int64_t warmup_steps_;
  int64_t warmup_end_;
};

}  // namespace loom
