#include "lr_schedule.h"

#include <cmath>

#include "loom/error.h"

namespace loom {

LrSchedule::LrSchedule(const LrScheduleOptions& o) : o_(o) {
  LOOM_CHECK(o.kind == "cosine" || o.kind == "constant", "lr_scheduler.kind must be cosine or constant, got '",
             o.kind, "'");
  LOOM_CHECK(o.total_steps >= 1, "data.total_steps must be >= 1, got ", o.total_steps);
  LOOM_CHECK(o.warmup_ratio >= 0 && o.warmup_ratio < 1, "lr_scheduler.warmup_ratio must be in [0, 1), got ",
             o.warmup_ratio);
  LOOM_CHECK(o.init_steps >= 0, "lr_scheduler.init_steps must be >= 0, got ", o.init_steps);
  LOOM_CHECK(o.base_lr >= 0 && o.eta_min >= 0, "adam.lr and lr_scheduler.eta_min must be >= 0");
  // int() of Python truncates toward zero, as static_cast does for non-negative values.
  warmup_steps_ = static_cast<int64_t>(static_cast<double>(o.total_steps) * o.warmup_ratio);
  warmup_end_ = o.init_steps + warmup_steps_;
}

double LrSchedule::lr(int64_t e) const {
  if (e < o_.init_steps) return 0.0;
  if (e < warmup_end_) return o_.base_lr * static_cast<double>(e + 1 - o_.init_steps) / warmup_steps_;
  if (o_.kind == "constant") return o_.base_lr;
  const int64_t span = o_.total_steps - warmup_end_;
  if (span <= 0 || e >= o_.total_steps) return o_.eta_min;
  const double progress = static_cast<double>(e - warmup_end_) / static_cast<double>(span);
  return o_.eta_min + (o_.base_lr - o_.eta_min) * (1.0 + std::cos(M_PI * progress)) / 2.0;
}

}  // namespace loom
