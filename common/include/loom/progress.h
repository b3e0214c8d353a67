// Progress of a long job. On a TTY: one live line with done/total, rate and ETA, redrawn at most
// 5 times a second. Not on a TTY: a plain log line every `log_every_s` seconds, so batch logs stay
// greppable and short. Thread-safe: workers may call add() concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace loom {

class Progress {
 public:
  // unit: "B" formats as MB/GB; anything else is printed as a count ("docs", "packs").
  Progress(std::string label, uint64_t total, std::string unit = "B", double log_every_s = 30.0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(uint64_t done);
  void set(uint64_t done);
  // An extra counter shown with its rate ("tokens"), e.g. tokens/s next to MB/s.
  void set_extra(const std::string& name, uint64_t value);
  // Final line; also called by the destructor.
  void finish();
  double elapsed_s() const;

 private:
  void maybe_draw(bool force);
  std::string line() const;

  std::string label_, unit_, extra_name_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  std::atomic<uint64_t> extra_{0};
  double log_every_s_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::atomic<int64_t> last_draw_ns_{0};
};

// "1.23 GB", "512.0 KB"
std::string format_bytes(double bytes);
// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace loom
