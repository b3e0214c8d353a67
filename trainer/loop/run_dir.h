// The run folder's safety rules, taken by rank 0 before it writes anything there:
//   - FolderLock: FOLDER/loom.lock held with flock(LOCK_EX) for the whole run, holding
//     "HOST PID\n". The kernel drops the lock when the process dies (even by SIGKILL), so a stale
//     file never blocks; a second run into the same folder is refused, naming the holder. One for
//     job.run_dir (RunDirLock) and one for the checkpoint folder (lock_ckpt_folder): two runs with
//     their own run_dir but one ckpt.save_ckpt_folder would overwrite each other's checkpoints.
//   - prepare_fresh_run_dir: a run that does not resume must not mix with an earlier run's
//     checkpoints or metrics.jsonl (its first save would replace them, its metrics append after
//     theirs). It is refused unless job.overwrite, which moves the old run aside, never deleting.
#pragma once

#include <memory>
#include <string>

namespace loom {

inline constexpr const char* kRunDirLockName = "loom.lock";

class FolderLock {
 public:
  // Creates folder if needed and locks folder/loom.lock; when another process holds it, throws
  // loom::Error naming the folder, the holder's host and pid, and the config key `what` (e.g.
  // "job.run_dir") to give this run another value of.
  FolderLock(const std::string& folder, const std::string& what);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

class RunDirLock : public FolderLock {
 public:
  explicit RunDirLock(const std::string& run_dir) : FolderLock(run_dir, "job.run_dir") {}
};

// Refuses (loom::UsageError) a checkpoint folder that is a loom checkpoint (step_N) or lies inside
// one or inside another checkpoints folder, naming it and the run its config.ini records: saves
// there would mix with that checkpoint's files, and job.overwrite would move them aside.
void check_ckpt_folder_place(const std::string& ckpt_folder);

// check_ckpt_folder_place, then the checkpoint folder's lock (ckpt.save_ckpt_folder), or none when
// that folder is run_dir itself,
// whose RunDirLock covers it (a second flock on the same file would refuse this very run). Take it
// after run_dir's and before prepare_fresh_run_dir, which leaves held locks in place.
std::unique_ptr<FolderLock> lock_ckpt_folder(const std::string& ckpt_folder, const std::string& run_dir);

// What an earlier run left that a fresh run would clobber: "" when nothing, else a description
// ("metrics.jsonl, checkpoints step_10, step_20").
std::string earlier_run_outputs(const std::string& run_dir, const std::string& ckpt_folder);

// For a run that does not resume (no --resume). With earlier outputs: throws unless overwrite (a
// checkpoint folder outside run_dir holding another run's checkpoints is named with that run); with
// overwrite, moves everything in run_dir but the lock into RUN_DIR.old-YYYYMMDD_HHMMSS (and a
// checkpoint folder outside run_dir to CKPT.old-YYYYMMDD_HHMMSS); a checkpoint folder's lock file
// stays where it is (its folder is emptied instead of moved). Returns where the old run went
// ("" when nothing moved). The caller holds run_dir's RunDirLock. init_from (--init-from's folder,
// may be "") must not be among what moves: the run reads it after the move.
std::string prepare_fresh_run_dir(const std::string& run_dir, const std::string& ckpt_folder, bool overwrite,
                                  const std::string& init_from = "");

}  // namespace loom
