#include "lr_schedule.h"

#include <algorithm>
#include <cmath>

#include <sstream>

#include "loom/error.h"
#include "loom/json_text.h"

namespace loom {

LrSchedule::LrSchedule(const LrScheduleOptions& o) : o_(o) {
  LOOM_CHECK(o.kind == "cosine" || o.kind == "constant" || o.kind == "wsd",
             "lr_scheduler.kind must be cosine, constant or wsd, got '", o.kind, "'");
  LOOM_CHECK(o.decay_ratio > 0 && o.decay_ratio <= 1, "lr_scheduler.decay_ratio must be in (0, 1], got ", o.decay_ratio);
  LOOM_CHECK(o.total_steps >= 1, "data.total_steps must be >= 1, got ", o.total_steps);
  LOOM_CHECK(o.warmup_ratio >= 0 && o.warmup_ratio < 1, "lr_scheduler.warmup_ratio must be in [0, 1), got ",
             o.warmup_ratio);
  LOOM_CHECK(o.warmup_steps >= -1 && o.warmup_steps < o.total_steps,
             "lr_scheduler.warmup_steps must be -1 (use warmup_ratio) or in [0, data.total_steps), got ", o.warmup_steps);
  LOOM_CHECK(o.init_steps >= 0, "lr_scheduler.init_steps must be >= 0, got ", o.init_steps);
  LOOM_CHECK(o.eta_min >= 0, "lr_scheduler.eta_min must be >= 0, got ", o.eta_min);  // adam.lr: AdamOptions
  // int() of Python truncates toward zero, as static_cast does for non-negative values.
  warmup_steps_ = o.warmup_steps >= 0 ? o.warmup_steps
                                      : static_cast<int64_t>(static_cast<double>(o.total_steps) * o.warmup_ratio);
  warmup_end_ = o.init_steps + warmup_steps_;
}

double LrSchedule::lr(int64_t e) const {
  if (e < o_.init_steps) return 0.0;
  if (e < warmup_end_) return o_.base_lr * static_cast<double>(e + 1 - o_.init_steps) / warmup_steps_;
  if (o_.kind == "constant") return o_.base_lr;
  if (o_.kind == "wsd") {
    if (e >= o_.total_steps) return o_.eta_min;
    const int64_t decay_start =
        std::max(warmup_end_, o_.total_steps - static_cast<int64_t>(static_cast<double>(o_.total_steps) * o_.decay_ratio));
    if (e < decay_start) return o_.base_lr;
    const double f = static_cast<double>(e + 1 - decay_start) / static_cast<double>(o_.total_steps - decay_start);
    return o_.base_lr + (o_.eta_min - o_.base_lr) * f;
  }
  const int64_t span = o_.total_steps - warmup_end_;
  if (span <= 0 || e >= o_.total_steps) return o_.eta_min;
  const double progress = static_cast<double>(e - warmup_end_) / static_cast<double>(span);
  return o_.eta_min + (o_.base_lr - o_.eta_min) * (1.0 + std::cos(M_PI * progress)) / 2.0;
}

bool LrScheduleOptions::operator==(const LrScheduleOptions& o) const { return differences(o).empty(); }

std::string LrScheduleOptions::differences(const LrScheduleOptions& o) const {
  std::ostringstream out;
  const auto key = [&](const char* name, const std::string& a, const std::string& b) {
    if (a != b) out << (out.tellp() > 0 ? "; " : "") << name << ": " << a << " -> " << b;
  };
  key("lr_scheduler.kind", kind, o.kind);
  key("adam.lr", json_number(base_lr), json_number(o.base_lr));
  key("lr_scheduler.warmup_ratio", json_number(warmup_ratio), json_number(o.warmup_ratio));
  key("lr_scheduler.warmup_steps", std::to_string(warmup_steps), std::to_string(o.warmup_steps));
  key("lr_scheduler.init_steps", std::to_string(init_steps), std::to_string(o.init_steps));
  key("lr_scheduler.eta_min", json_number(eta_min), json_number(o.eta_min));
  key("data.total_steps", std::to_string(total_steps), std::to_string(o.total_steps));
  if (kind == "wsd" || o.kind == "wsd")
    key("lr_scheduler.decay_ratio", json_number(decay_ratio), json_number(o.decay_ratio));
  return out.str();
}

}  // namespace loom
