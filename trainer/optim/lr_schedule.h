// Learning rate as a closed-form function of the number of successful updates e (skipped updates do
// not advance it), so a resume needs only e. InternLM's warmup + cosine:
//   Wst = int(total_steps * warmup_ratio), W = init_steps + Wst
//   lr(e) = 0                                                          e < init_steps
//         = base * (e + 1 - init_steps) / Wst                          e < W
//         = eta_min + (base - eta_min) * (1 + cos(pi * (e - W) / (total_steps - W))) / 2
// "constant" gives base for every e (after the same warmup).
#pragma once

#include <cstdint>
#include <string>

namespace loom {

struct LrScheduleOptions {
  std::string kind = "cosine";  // cosine | constant
  double base_lr = 1e-4;        // adam.lr
  double warmup_ratio = 0.0;    // lr_scheduler.warmup_ratio
  int64_t init_steps = 0;       // lr_scheduler.init_steps: updates at lr 0 before the warmup
  double eta_min = 0.0;         // lr_scheduler.eta_min
  int64_t total_steps = 1;      // data.total_steps
};

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleOptions& o);
  double lr(int64_t updates) const;
  int64_t warmup_end() const { return warmup_end_; }

 private:
  LrScheduleOptions o_;
  int64_t warmup_steps_;
  int64_t warmup_end_;
};

}  // namespace loom
