#include "run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "loom/error.h"
#include "loom/log.h"
#include "loom/sys.h"

namespace loom {

namespace {

// The entries of one folder (not recursive), "." and ".." excluded, sorted.
// A folder's names, sorted; none for a folder that is not there.
std::vector<std::string> entries(const std::string& dir) {
  return sys::is_directory(dir) ? sys::list_dir(dir) : std::vector<std::string>{};
}

std::string utc_stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d_%H%M%S", &tm);
  return buf;
}

// PATH.old-STAMP, with -2, -3... when two moves fall in the same second.
std::string aside_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const std::string base = p + ".old-" + utc_stamp();
  std::string name = base;
  for (int i = 2; sys::exists(name); ++i) name = base + "-" + std::to_string(i);
  return name;
}

// Moves path to aside, except the lock files in `keep` (canonical paths) under it: a folder on the
// way to one is made anew in aside and its entries moved one by one, so each lock stays where its
// holder holds it and where the next run looks for it.
void move_aside(const std::string& path, const std::string& aside, const std::vector<std::string>& keep);

// The entries of folder `path` into a new folder `aside`, but the locks in `keep`; `path` stays.
void move_entries_aside(const std::string& path, const std::string& aside, const std::vector<std::string>& keep) {
  sys::make_dirs(aside);
  for (const std::string& name : entries(path))
    if (std::find(keep.begin(), keep.end(), sys::canonical_path(path + "/" + name)) == keep.end())
      move_aside(path + "/" + name, aside + "/" + name, keep);
  sys::fsync_dir(aside);
  sys::fsync_dir(path);
}

void move_aside(const std::string& path, const std::string& aside, const std::vector<std::string>& keep) {
  const std::string c = sys::canonical_path(path);
  const bool holds_lock =
      std::any_of(keep.begin(), keep.end(), [&](const std::string& k) { return k.rfind(c + "/", 0) == 0; });
  if (!holds_lock || !sys::is_directory(path)) {
    sys::rename_file(path, aside);
    return;
  }
  move_entries_aside(path, aside, keep);
}

bool inside(const std::string& path, const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return path == d || path.rfind(d + "/", 0) == 0;
}

}  // namespace

FolderLock::FolderLock(const std::string& folder, const std::string& what) : path_(folder + "/" + kRunDirLockName) {
  sys::make_dirs(folder);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  LOOM_CHECK(fd_ >= 0, path_, ": open: ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    LOOM_CHECK(err == EWOULDBLOCK, path_, ": flock: ", std::strerror(err));
    std::string holder = sys::read_file(path_);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    const size_t sp = holder.find(' ');
    const std::string who = sp == std::string::npos ? "an unknown process (it has not written its name yet)"
                                                    : "host " + holder.substr(0, sp) + " pid " + holder.substr(sp + 1);
    LOOM_FAIL(folder, " (", what, "): another loom-train run holds ", path_, " (", who,
              "); wait for it to end, or give this run another ", what);
  }
  // Only the holder writes: the old holder's name goes with the lock.
  const std::string me = sys::hostname() + " " + std::to_string(::getpid()) + "\n";
  LOOM_CHECK(::ftruncate(fd_, 0) == 0, path_, ": ftruncate: ", std::strerror(errno));
  LOOM_CHECK(::pwrite(fd_, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size()), path_, ": write: ",
             std::strerror(errno));
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock; the file stays (removing it would race a waiting run)
}

std::unique_ptr<FolderLock> lock_ckpt_folder(const std::string& ckpt_folder, const std::string& run_dir) {
  if (sys::same_file(ckpt_folder, run_dir)) return nullptr;
  return std::make_unique<FolderLock>(ckpt_folder, "ckpt.save_ckpt_folder");
}

std::string earlier_run_outputs(const std::string& run_dir, const std::string& ckpt_folder) {
  std::vector<std::string> found;
  if (sys::exists(run_dir + "/metrics.jsonl")) found.push_back("metrics.jsonl");
  std::string steps;
  for (const std::string& name : entries(ckpt_folder))
    if (name.rfind("step_", 0) == 0) steps += (steps.empty() ? "" : ", ") + name;
  if (!steps.empty()) found.push_back("checkpoints " + steps + " in " + ckpt_folder);
  else if (sys::exists(ckpt_folder + "/latest")) found.push_back(ckpt_folder + "/latest");
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : "; ") + f;
  return out;
}

std::string prepare_fresh_run_dir(const std::string& run_dir, const std::string& ckpt_folder, bool overwrite,
                                  const std::string& init_from) {
  const std::string earlier = earlier_run_outputs(run_dir, ckpt_folder);
  if (earlier.empty()) return "";
  LOOM_CHECK(overwrite, "job.run_dir ", run_dir, " already holds an earlier run (", earlier,
             "): a fresh run would overwrite it. Continue it with --resume auto, give another job.run_dir, or "
             "pass --job.overwrite=true to move the old run aside (nothing is deleted)");
  LOOM_CHECK(init_from.empty() || !(inside(init_from, run_dir) || inside(init_from, ckpt_folder)), "--init-from ",
             init_from, " lies in the earlier run that job.overwrite would move aside: copy it elsewhere first, or "
             "give this run another job.run_dir");
  // Everything but the locks (run_dir's, and the checkpoint folder's, held by this run) moves into
  // one folder beside run_dir: the locks stay held meanwhile.
  std::vector<std::string> keep;
  for (const std::string& lock : {run_dir + "/" + kRunDirLockName, ckpt_folder + "/" + kRunDirLockName})
    if (sys::exists(lock)) keep.push_back(sys::canonical_path(lock));
  const std::string aside = aside_name(run_dir);
  move_entries_aside(run_dir, aside, keep);
  if (!inside(ckpt_folder, run_dir) && sys::exists(ckpt_folder)) {
    const std::string ckpt_aside = aside_name(ckpt_folder);
    move_aside(ckpt_folder, ckpt_aside, keep);
    log::warn("job.overwrite: moved the earlier checkpoints ", ckpt_folder, " to ", ckpt_aside);
  }
  log::warn("job.overwrite: moved the earlier run in ", run_dir, " (", earlier, ") to ", aside);
  return aside;
}

}  // namespace loom
