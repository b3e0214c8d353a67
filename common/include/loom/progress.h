// Progress of a long job. On a TTY: one live line with done/total, rate and ETA, redrawn at most
// 5 times a second. Not on a TTY: a plain log line every `log_every_s` seconds, so batch logs stay
// greppable and short. Thread-safe: workers may call add() concurrently.
//
// Below it, the figures of every line written for people (log lines, progress, summaries): a few
// significant digits, thousands separators, one way to show a percentage. Files and JSON use
// json_number (loom/json_text.h) instead: the shortest text that reads back as the same double.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>

namespace loom {

class Progress {
 public:
  // unit: "B" formats as MB/GB; anything else is printed as a count ("docs", "packs").
  Progress(std::string label, uint64_t total, std::string unit = "B", double log_every_s = 30.0);
  // A job resumed part way: `done` counts toward done/total but not toward the rate and ETA.
  void set_base(uint64_t done);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(uint64_t done);
  void set(uint64_t done);
  // An extra counter shown with its rate ("tokens"), e.g. tokens/s next to MB/s.
  void set_extra(const std::string& name, uint64_t value);
  // off: no ETA on the line (its owner prints a better one elsewhere, e.g. loom-train's metrics line).
  void show_eta(bool on) { show_eta_ = on; }
  // Final line; also called by the destructor.
  void finish();
  double elapsed_s() const;
  std::string line() const;  // the text drawn now

 private:
  void maybe_draw(bool force);

  std::string label_, unit_, extra_name_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  uint64_t base_ = 0;
  std::atomic<uint64_t> extra_{0};
  double log_every_s_;
  bool tty_;
  bool finished_ = false;
  bool show_eta_ = true;
  std::chrono::steady_clock::time_point start_;
  std::atomic<int64_t> last_draw_ns_{0};
};

// "1.23 GB", "512 B"
std::string format_bytes(double bytes);
// "1h02m", "3m05s", "12.0s"
std::string format_duration(double seconds);
namespace detail {
std::string group_thousands(uint64_t n);
}
// A count for people: "1,234,567" (any integer type).
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
std::string format_count(Int n) {
  if constexpr (std::is_signed_v<Int>) {
    if (n < 0) return "-" + detail::group_thousands(static_cast<uint64_t>(-(n + 1)) + 1);
  }
  return detail::group_thousands(static_cast<uint64_t>(n));
}
// A measured value for people, `digits` significant digits: "3.412", "0.0001", "2.5e-05"; values of
// 10^digits and more as a rounded count with separators ("12,346"). inf/NaN as "inf"/"nan".
std::string format_number(double v, int digits = 4);
// part/whole as a percentage with 3 significant digits: "0.044%", "12.3%", "100%" ("0%" when whole is 0).
std::string format_percent(double part, double whole);

}  // namespace loom
