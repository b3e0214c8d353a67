// SIGTERM/SIGINT as a request, not a kill: while a StopSignal lives, either signal sets a flag that
// the loop checks between steps (it then finishes the step, saves a checkpoint and exits 0). The
// previous handlers come back on destruction.
#pragma once

#include <csignal>

namespace loom {

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  bool requested() const;
  int signal_number() const;  // the signal that arrived (0 = none)

 private:
  struct sigaction old_term_ {}, old_int_{};
};

}  // namespace loom
