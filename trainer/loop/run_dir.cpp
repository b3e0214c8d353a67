#include "run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <sstream>
#include <vector>

#include "loom/cli.h"
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

// step_N or step_N.tmp: a checkpoint's folder name, complete or being written (checkpoint.h).
bool is_step_name(std::string name) {
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) name.resize(name.size() - 4);
  return name.size() > 5 && name.rfind("step_", 0) == 0 &&
         name.find_first_not_of("0123456789", 5) == std::string::npos;
}

// A checkpoint folder, as checkpoint.h lays one out: step_N(.tmp) with a checkpoint's files.
bool is_step_folder(const std::string& dir) {
  if (!is_step_name(sys::basename(dir)) || !sys::is_directory(dir)) return false;
  for (const char* f : {"manifest.json", "state.json", "model.safetensors"})
    if (sys::exists(dir + "/" + f)) return true;
  return false;
}

// The step_N folders of a checkpoints folder, newest last (a folder without `latest` has none).
std::vector<std::string> step_folders(const std::string& dir) {
  std::vector<std::pair<uint64_t, std::string>> found;
  for (const std::string& name : entries(dir))
    if (is_step_name(name) && name.find('.') == std::string::npos && name.size() <= 5 + 18 &&
        sys::is_directory(dir + "/" + name))
      found.emplace_back(std::stoull(name.substr(5)), name);
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

// job.run_dir as the config.ini of checkpoint folder `step_dir` records it ("" when it does not).
std::string recorded_run_dir(const std::string& step_dir) {
  const std::string path = step_dir + "/config.ini";
  if (!sys::exists(path)) return "";
  std::istringstream in(sys::read_file(path));
  std::string section;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.front() == '[') section = line;
    if (section != "[job]" || line.rfind("run_dir", 0) != 0) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || line.find_first_not_of(' ', 7) != eq) continue;
    const size_t v = line.find_first_not_of(' ', eq + 1);
    return v == std::string::npos ? "" : line.substr(v);
  }
  return "";
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

void check_ckpt_folder_place(const std::string& ckpt_folder) {
  const std::string c = sys::canonical_path(ckpt_folder);
  for (std::string p = c;; p = sys::dirname(p)) {
    // Above the folder, a checkpoints folder (`latest` and step_N folders) counts too: its run's
    // pruning and job.overwrite reach everything inside it.
    const bool checkpoint =
        is_step_folder(p) || (p != c && sys::exists(p + "/latest") && !step_folders(p).empty());
    if (checkpoint) {
      std::string run = recorded_run_dir(p);
      if (run.empty() && !step_folders(p).empty()) run = recorded_run_dir(p + "/" + step_folders(p).back());
      throw UsageError(str("ckpt.save_ckpt_folder ", ckpt_folder, p == c ? " is" : " is inside", " the loom checkpoint ",
                           p, run.empty() ? "" : " of the run in " + run,
                           ": this run's saves would sit among its files, and job.overwrite would move them aside "
                           "(that run could no longer resume); choose a folder outside every checkpoint"));
    }
    if (p == "/" || p.empty()) break;
  }
}

std::unique_ptr<FolderLock> lock_ckpt_folder(const std::string& ckpt_folder, const std::string& run_dir) {
  check_ckpt_folder_place(ckpt_folder);  // before the lock file is made inside it
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
  if (!overwrite && !inside(sys::canonical_path(ckpt_folder), sys::canonical_path(run_dir))) {
    // A checkpoint folder of another run (its checkpoints' config.ini names their run_dir).
    const std::vector<std::string> steps = step_folders(ckpt_folder);
    const std::string other = steps.empty() ? "" : recorded_run_dir(ckpt_folder + "/" + steps.back());
    std::string list;
    for (const std::string& st : steps) list += (list.empty() ? "" : ", ") + st;
    LOOM_CHECK(other.empty() || sys::same_file(other, run_dir), "ckpt.save_ckpt_folder ", ckpt_folder,
               " holds the checkpoints of the run in ", other, " (", list,
               "): a fresh run would overwrite them. Continue that run with --job.run_dir=", other,
               " --resume auto, give this run another ckpt.save_ckpt_folder, or pass --job.overwrite=true to move "
               "them aside (nothing is deleted)");
  }
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
