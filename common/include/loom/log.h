// Logging: one line per message on stderr, "[loom HH:MM:SS rank R] LEVEL message", so logs from many
// ranks stay greppable. Thread-safe. Only the process-wide rank and level are global.
#pragma once

#include <string>

#include "loom/error.h"

namespace loom::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_rank(int rank);
int rank();
void set_level(Level level);
bool enabled(Level level);
void write(Level level, const std::string& msg);

template <typename... Parts>
void debug(const Parts&... parts) {
  if (enabled(Level::kDebug)) write(Level::kDebug, str(parts...));
}
template <typename... Parts>
void info(const Parts&... parts) {
  if (enabled(Level::kInfo)) write(Level::kInfo, str(parts...));
}
template <typename... Parts>
void warn(const Parts&... parts) {
  if (enabled(Level::kWarn)) write(Level::kWarn, str(parts...));
}
template <typename... Parts>
void error(const Parts&... parts) {
  write(Level::kError, str(parts...));
}

}  // namespace loom::log
