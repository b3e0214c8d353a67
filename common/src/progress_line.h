// Shared between log.cpp and progress.cpp: a progress line on a TTY is erased before a log line is
// printed, so the two never interleave.
#pragma once

#include <mutex>

namespace loom::detail {
std::mutex& terminal_mutex();
// Erases the live progress line if one is shown; call with terminal_mutex() held.
void clear_progress_line();
void set_progress_line_shown(bool shown);
}  // namespace loom::detail
