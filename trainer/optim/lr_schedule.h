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

namespace loom {

struct LrScheduleOptions {
  std::string kind = "cosine";  // cosine | constant | wsd
  double base_lr = 1e-4;        // adam.lr
  double warmup_ratio = 0.0;    // lr_scheduler.warmup_ratio
  int64_t warmup_steps = -1;    // lr_scheduler.warmup_steps: Wst itself (Megatron's --lr-warmup-iters); -1 = from the ratio
  int64_t init_steps = 0;       // lr_scheduler.init_steps: updates at lr 0 before the warmup
  double eta_min = 0.0;         // lr_scheduler.eta_min
  int64_t total_steps = 1;      // data.total_steps
  double decay_ratio = 0.1;     // lr_scheduler.decay_ratio: wsd's final decay, a fraction of total_steps

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
