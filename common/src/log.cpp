#include "loom/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "progress_line.h"

namespace loom::log {

namespace {
std::atomic<int> g_rank{0};
std::atomic<int> g_world{1};
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
const char* name(Level l) {
  switch (l) {
    case Level::kDebug: return "DEBUG";
    case Level::kInfo: return "INFO";
    case Level::kWarn: return "WARN";
    case Level::kError: return "ERROR";
  }
  return "?";
}
}  // namespace

void set_rank(int r) { g_rank = r; }
int rank() { return g_rank; }
void set_world(int w) { g_world = w; }
int world() { return g_world; }
void set_level(Level level) { g_level = static_cast<int>(level); }
bool enabled(Level level) { return static_cast<int>(level) >= g_level; }

void write(Level level, const std::string& msg) {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char ts[16];
  std::strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(detail::terminal_mutex());
  detail::clear_progress_line();
  if (g_world.load() > 1) std::fprintf(stderr, "[loom %s rank %d] %s %s\n", ts, g_rank.load(), name(level), msg.c_str());
  else std::fprintf(stderr, "[loom %s] %s %s\n", ts, name(level), msg.c_str());
  std::fflush(stderr);
}

}  // namespace loom::log
