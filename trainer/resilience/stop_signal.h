// SIGTERM/SIGINT as a request, not a kill: while a StopSignal lives, either signal sets a flag that
// the loop checks between steps (it then finishes the step, saves a checkpoint and exits 0). The
// previous handlers come back on destruction.
// One StopSignal at a time per process (the handler's state is global).
#pragma once

#include <csignal>

#include "loom/fd.h"

namespace loom {

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  bool requested() const;
  int signal_number() const;  // the signal that arrived (0 = none)
  // Blocks until SIGTERM or SIGINT has arrived (at once if one already has), whichever thread the
  // kernel delivered it to: the handler also writes to a pipe this reads.
  void wait() const;

 private:
  struct sigaction old_term_ {}, old_int_{};
  sys::Fd read_, write_;  // the handler's wake-up pipe
};

}  // namespace loom
