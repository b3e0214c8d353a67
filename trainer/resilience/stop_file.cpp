#include "stop_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "communicator.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/sys.h"

namespace loom {

int64_t parse_stop_file_text(const std::string& text, bool* garbage) {
  *garbage = false;
  const char* ws = " \t\r\n\v\f";
  const size_t b = text.find_first_not_of(ws);
  if (b == std::string::npos) return 0;  // empty: nothing asked
  const std::string t = text.substr(b, text.find_last_not_of(ws) - b + 1);
  size_t i = 0;
  bool negative = false;
  if (t[0] == '+' || t[0] == '-') negative = t[i++] == '-';
  if (i == t.size()) {
    *garbage = true;
    return 0;
  }
  int64_t v = 0;
  for (; i < t.size(); ++i) {
    if (t[i] < '0' || t[i] > '9' || v > (INT64_MAX - 9) / 10) {
      *garbage = true;
      return 0;
    }
    v = v * 10 + (t[i] - '0');
  }
  return negative ? -v : v;
}

StopDecision stop_decision(int64_t command, int64_t steps_done) {
  StopDecision d;
  if (command < 0 && -command == steps_done) d.save = true;
  if (command > 0 && command == steps_done) d.save = d.quit = true;
  return d;
}

StopFile::StopFile(std::string path, bool create_if_missing) : path_(std::move(path)) {
  if (path_.empty() || !create_if_missing || sys::exists(path_)) return;
  try {
    const std::string dir = sys::dirname(path_);
    if (!dir.empty() && dir != ".") sys::make_dirs(dir);
    sys::AtomicFile f(path_);
    f.write("0\n");
    f.commit();
    log::info("stop file ", path_, " created: write -N to save at step N, +N to save and stop at step N");
  } catch (const Error& e) {
    log::warn("stop file ", path_, " could not be created: ", e.what());
  }
}

int64_t StopFile::poll() {
  if (path_.empty()) return 0;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    const int err = errno;
    if (err != ENOENT) {
      const std::string w = str("stop file ", path_, ": stat: ", std::strerror(err), " (ignored)");
      if (w != last_warning_) log::warn(w);
      last_warning_ = w;
    }
    if (command_ != 0) log::info("stop file ", path_, " is gone: no pending command");
    command_ = 0, seen_ = false;
    return 0;
  }
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (seen_ && mtime_ns == mtime_ns_ && st.st_size == size_ && st.st_ino == inode_) return command_;
  seen_ = true, mtime_ns_ = mtime_ns, size_ = st.st_size, inode_ = st.st_ino;
  std::string text;
  try {
    text = sys::read_file(path_);
  } catch (const Error& e) {
    log::warn("stop file ", path_, ": ", e.what(), " (ignored)");
    seen_ = false;  // try again next step
    return command_ = 0;
  }
  bool garbage = false;
  const int64_t c = parse_stop_file_text(text, &garbage);
  if (garbage) {
    std::string shown = text.substr(0, 80);
    for (char& ch : shown)
      if (ch == '\n' || ch == '\r') ch = ' ';
    log::warn("stop file ", path_, " holds '", shown, text.size() > 80 ? "...'" : "'",
              ", not an integer: ignored (write -N to save at step N, +N to save and stop at step N, 0 for nothing)");
  } else if (c != command_ && c != 0) {
    log::info("stop file ", path_, ": will save", c > 0 ? " and stop" : "", " after step ", c > 0 ? c : -c);
  }
  return command_ = c;
}

StopDecision StopFile::check(int64_t steps_done, Communicator* comm) {
  if (path_.empty()) return {};
  const bool reader = !comm || comm->rank() == 0;
  const int64_t before = command_;
  int64_t c = reader ? poll() : 0;
  if (comm && comm->world() > 1) {
    // Exact for |c| < 2^53; ranks other than 0 contribute 0.
    c = static_cast<int64_t>(comm->all_reduce_scalar(static_cast<double>(c), ReduceOp::kSum));
    command_ = c;
  }
  if (reader && c != before && c != 0 && (c > 0 ? c : -c) < steps_done)
    log::warn("stop file ", path_, ": step ", c > 0 ? c : -c, " is already done (now ", steps_done,
              "): the command never fires");
  return stop_decision(c, steps_done);
}

}  // namespace loom
