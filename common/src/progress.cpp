#include "loom/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "loom/log.h"
#include "progress_line.h"

namespace loom {

namespace detail {
namespace {
bool g_line_shown = false;
}
std::mutex& terminal_mutex() {
  static std::mutex m;
  return m;
}
void clear_progress_line() {
  if (g_line_shown) {
    std::fputs("\r\033[K", stderr);
    g_line_shown = false;
  }
}
void set_progress_line_shown(bool shown) { g_line_shown = shown; }
}  // namespace detail

std::string format_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int i = 0;
  while (b >= 1000.0 && i < 4) b /= 1000.0, ++i;
  char buf[32];
  std::snprintf(buf, sizeof(buf), i == 0 ? "%.0f %s" : "%.3g %s", b, units[i]);
  return buf;
}

std::string format_duration(double s) {
  char buf[32];
  auto t = static_cast<long long>(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof(buf), "%lldh%02lldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof(buf), "%lldm%02llds", t / 60, t % 60);
  else std::snprintf(buf, sizeof(buf), "%.1fs", s);
  return buf;
}

namespace detail {
std::string group_thousands(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
}  // namespace detail

std::string format_number(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::fabs(v) >= std::pow(10.0, digits) - 0.5 && std::fabs(v) < 9e18) return format_count(std::llround(v));
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

std::string format_percent(double part, double whole) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.3g%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

Progress::Progress(std::string label, uint64_t total, std::string unit, double log_every_s)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), log_every_s_(log_every_s),
      tty_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { finish(); }

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::set_base(uint64_t d) {
  base_ = d;
  done_ = d;
}

void Progress::add(uint64_t d) {
  done_ += d;
  maybe_draw(false);
}

void Progress::set(uint64_t d) {
  done_ = d;
  maybe_draw(false);
}

void Progress::set_extra(const std::string& name, uint64_t value) {
  if (extra_name_.empty()) extra_name_ = name;
  extra_ = value;
}

std::string Progress::line() const {
  const double el = elapsed_s();
  const uint64_t done_n = done_.load();
  const double done = static_cast<double>(done_n);
  const bool bytes = unit_ == "B";
  auto fmt = [&](double v) { return bytes ? format_bytes(v) : format_number(v, 3) + " " + unit_; };
  std::string s = label_ + ": ";
  if (bytes) s += format_bytes(done) + (total_ > 0 ? " / " + format_bytes(static_cast<double>(total_)) : "");
  else s += format_count(done_n) + (total_ > 0 ? "/" + format_count(total_) : "") + " " + unit_;
  if (total_ > 0) s += " (" + format_percent(done, static_cast<double>(total_)) + ")";
  const double new_done = done_n > base_ ? static_cast<double>(done_n - base_) : 0.0;
  if (el > 0) {
    s += ", " + fmt(new_done / el) + "/s";
    if (!extra_name_.empty()) s += ", " + format_number(static_cast<double>(extra_.load()) / el, 3) + " " + extra_name_ + "/s";
    if (show_eta_ && total_ > 0 && new_done > 0 && done < static_cast<double>(total_))
      s += ", ETA " + format_duration(el * (static_cast<double>(total_) - done) / new_done);
  }
  return s;
}

void Progress::maybe_draw(bool force) {
  auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  int64_t last = last_draw_ns_.load();
  const int64_t every = tty_ ? 200'000'000 : static_cast<int64_t>(log_every_s_ * 1e9);
  if (!force && now_ns - last < every) return;
  if (!last_draw_ns_.compare_exchange_strong(last, now_ns) && !force) return;
  if (tty_) {
    std::lock_guard<std::mutex> lock(detail::terminal_mutex());
    std::fprintf(stderr, "\r\033[K%s", line().c_str());
    std::fflush(stderr);
    detail::set_progress_line_shown(true);
  } else {
    log::info(line());
  }
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_) {
    std::lock_guard<std::mutex> lock(detail::terminal_mutex());
    detail::clear_progress_line();
  }
  // The final line is logged on both TTY and non-TTY so the summary survives in the scrollback.
  if (elapsed_s() > 1.0) log::info(line(), " in ", format_duration(elapsed_s()));
}

}  // namespace loom
