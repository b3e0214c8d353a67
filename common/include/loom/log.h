// Logging: one line per message on stderr, "[loom HH:MM:SS] LEVEL message"; in a job of several
// ranks "[loom HH:MM:SS rank R] LEVEL message", so logs from many ranks stay greppable. Thread-safe.
// Only the process-wide rank, world size and level are global.
#pragma once

#include <string>

#include "loom/error.h"

namespace loom::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_rank(int rank);
int rank();
// The number of ranks of the job (1 for single-process tools): the prefix names the rank only above 1.
void set_world(int world);
int world();
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
// A warning every rank would print alike (it is about the config, the data or the checkpoint,
// which all ranks share): rank 0 prints it for the job.
template <typename... Parts>
void job_warn(const Parts&... parts) {
  if (rank() == 0 && enabled(Level::kWarn)) write(Level::kWarn, str(parts...));
}
template <typename... Parts>
void error(const Parts&... parts) {
  write(Level::kError, str(parts...));
}

}  // namespace loom::log
