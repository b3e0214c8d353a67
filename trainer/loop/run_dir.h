// The run folder's safety rules, taken by rank 0 before it writes anything there:
//   - RunDirLock: job.run_dir/loom.lock held with flock(LOCK_EX) for the whole run, holding
//     "HOST PID\n". The kernel drops the lock when the process dies (even by SIGKILL), so a stale
//     file never blocks; a second run into the same folder is refused, naming the holder.
//   - prepare_fresh_run_dir: a run that does not resume must not mix with an earlier run's
//     checkpoints or metrics.jsonl (its first save would replace them, its metrics append after
//     theirs). It is refused unless job.overwrite, which moves the old run aside, never deleting.
#pragma once

#include <string>

namespace loom {

inline constexpr const char* kRunDirLockName = "loom.lock";

class RunDirLock {
 public:
  // Creates run_dir if needed and locks run_dir/loom.lock; throws loom::Error naming the holder's
  // host and pid when another process holds it.
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// What an earlier run left that a fresh run would clobber: "" when nothing, else a description
// ("metrics.jsonl, checkpoints step_10, step_20").
std::string earlier_run_outputs(const std::string& run_dir, const std::string& ckpt_folder);

// For a run that does not resume (no --resume). With earlier outputs: throws unless overwrite; with
// overwrite, moves everything in run_dir but the lock into RUN_DIR.old-YYYYMMDD_HHMMSS (and a
// checkpoint folder outside run_dir to CKPT.old-YYYYMMDD_HHMMSS). Returns where the old run went
// ("" when nothing moved). The caller holds run_dir's RunDirLock. init_from (--init-from's folder,
// may be "") must not be among what moves: the run reads it after the move.
std::string prepare_fresh_run_dir(const std::string& run_dir, const std::string& ckpt_folder, bool overwrite,
                                  const std::string& init_from = "");

}  // namespace loom
