// Running a child process with a bounded lifetime: its stdin fed from a string, its stdout optionally
// captured, killed when it outlives the timeout. Failures come back as text, never as exceptions, so
// a caller on a background thread (alert delivery) needs no try.
#pragma once

#include <string>
#include <vector>

namespace loom::sys {

struct ProcessOptions {
  double timeout_s = 10;        // from the spawn to the reaped exit; then SIGKILL to its group
  bool capture_stdout = false;  // else the child writes to this process's stdout
};

struct ProcessResult {
  std::string error;     // "" when the child ran and was reaped; else what failed (spawn, pipe, timeout)
  bool timed_out = false;
  int exit_code = -1;    // its exit status, when it exited
  int signal = 0;        // the signal that ended it, when one did (SIGKILL after a timeout)
  std::string output;    // its stdout, when captured
  bool ok() const { return error.empty() && exit_code == 0; }
};

// Spawns argv (argv[0] looked up in PATH) with posix_spawn, not fork (safe in a multi-threaded
// process), in its own process group so that a timeout kills whatever it started too. input is
// written to its stdin, which is then closed; a child that exits without reading is not an error
// (the SIGPIPE of that write is blocked and discarded, this process survives it).
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& input, const ProcessOptions& o);

}  // namespace loom::sys
