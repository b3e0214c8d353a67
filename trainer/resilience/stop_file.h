// InternLM's stop file (ckpt.stop_file): a person steers a running job by writing one integer to a
// file. InternLM's CheckpointManager.quit_signal_handler (internlm/utils/model_checkpoint.py), run
// after every step with step_count = steps done, reads the file on global rank 0, broadcasts the
// integer, and acts when it matches exactly:
//
//    0           nothing (InternLM writes "0" into the file at start-up)
//   -N  (N > 0)  save a checkpoint when step_count == N, and go on training
//   +N or N      save a checkpoint when step_count == N, and stop
//
// A value for a step already passed does nothing (an exact match, as in InternLM); loom also warns.
// Differences from InternLM, all on the side of not crashing or losing a command:
//   - garbage (not an integer) is a warning naming the file and its content, and means 0 (InternLM's
//     int(msg) raises and kills the job); surrounding whitespace and newlines are ignored;
//   - a missing file means 0; the file is created with "0" only when missing (InternLM overwrites
//     it, losing a command written before a restart);
//   - the file is re-read only when its mtime, size or inode changed (one stat per step).
#pragma once

#include <cstdint>
#include <string>

namespace loom {

class Communicator;

// The integer in the stop file's text; 0 with *garbage = true when it is not one (no throw).
int64_t parse_stop_file_text(const std::string& text, bool* garbage);

struct StopDecision {
  bool save = false;  // save a checkpoint at this step
  bool quit = false;  // ... and stop training (save is then true too)
};
// InternLM's rule above, for a command and the number of steps done.
StopDecision stop_decision(int64_t command, int64_t steps_done);

class StopFile {
 public:
  // path "" = no stop file (check() always answers nothing). create_if_missing: write "0" to a
  // missing file (rank 0 only; failures to create are a warning, not an error).
  StopFile(std::string path, bool create_if_missing);

  // The file's command now (0 when missing, unreadable or garbage); re-reads only on change, and
  // logs each new command once.
  int64_t poll();
  // Called by every rank after each step (steps_done = steps completed). Rank 0 polls; with a
  // communicator of several ranks the command is shared (one scalar all-reduce), so every rank
  // takes the same decision. comm may be null (single process).
  StopDecision check(int64_t steps_done, Communicator* comm);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int64_t command_ = 0;
  bool seen_ = false;  // a stat succeeded before
  int64_t mtime_ns_ = 0, size_ = -1;
  uint64_t inode_ = 0;
  std::string last_warning_;
};

}  // namespace loom
