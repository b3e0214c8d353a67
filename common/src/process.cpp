#include "loom/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "loom/error.h"
#include "loom/fd.h"

extern char** environ;

namespace loom::sys {

namespace {

// Drops a SIGPIPE raised at this thread while it was blocked, unless it was blocked before.
class BlockSigpipe {
 public:
  BlockSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~BlockSigpipe() {
    if (!sigismember(&old_, SIGPIPE)) {
      const timespec zero{0, 0};
      while (::sigtimedwait(&pipe_, nullptr, &zero) > 0) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  BlockSigpipe(const BlockSigpipe&) = delete;
  BlockSigpipe& operator=(const BlockSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
};

bool pipe_pair(Fd& read_end, Fd& write_end, std::string& error) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    error = errno_text("pipe2", errno);
    return false;
  }
  read_end = Fd(fds[0]);
  write_end = Fd(fds[1]);
  return true;
}

// Feeds input to `in` and collects `out` (either may be invalid) until both are done, the child
// closed them, or the deadline passes. "" or what went wrong.
std::string pump(Fd& in, const std::string& input, Fd& out, std::string& output, Deadline deadline) {
  for (Fd* f : {&in, &out})
    if (f->valid() && ::fcntl(f->get(), F_SETFL, O_NONBLOCK) != 0) return errno_text("fcntl", errno);
  size_t sent = 0;
  if (input.empty()) in.reset();  // EOF for the child
  while (in.valid() || out.valid()) {
    pollfd p[2];
    nfds_t n = 0;
    if (in.valid()) p[n++] = {in.get(), POLLOUT, 0};
    if (out.valid()) p[n++] = {out.get(), POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "timed out";
    const int ready = ::poll(p, n, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (ready < 0 && errno != EINTR) return errno_text("poll", errno);
    if (ready <= 0) continue;
    if (in.valid()) {
      const ssize_t w = ::write(in.get(), input.data() + sent, input.size() - sent);
      if (w > 0) {
        sent += static_cast<size_t>(w);
        if (sent == input.size()) in.reset();
      } else if (w < 0 && errno == EPIPE) {
        in.reset();  // the child exits without reading all of it: its business
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        return errno_text("write to the child's stdin", errno);
      }
    }
    if (out.valid()) {
      char buf[4096];
      const ssize_t r = ::read(out.get(), buf, sizeof buf);
      if (r > 0) {
        output.append(buf, static_cast<size_t>(r));
      } else if (r == 0) {
        out.reset();
      } else if (errno != EAGAIN && errno != EINTR) {
        return errno_text("read from the child's stdout", errno);
      }
    }
  }
  return "";
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& input, const ProcessOptions& o) {
  ProcessResult res;
  if (argv.empty()) {
    res.error = "run_process: no program";
    return res;
  }
  const Deadline deadline = deadline_after(o.timeout_s);
  Fd in_read, in_write, out_read, out_write;
  if (!pipe_pair(in_read, in_write, res.error)) return res;
  if (o.capture_stdout && !pipe_pair(out_read, out_write, res.error)) return res;

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, in_read.get(), STDIN_FILENO);
  if (o.capture_stdout) ::posix_spawn_file_actions_adddup2(&actions, out_write.get(), STDOUT_FILENO);
  ::posix_spawnattr_init(&attr);
  ::posix_spawnattr_setpgroup(&attr, 0);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  ::posix_spawnattr_setsigmask(&attr, &none);  // not the calling thread's mask
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    res.error = errno_text(str("posix_spawn ", argv[0]).c_str(), rc);
    return res;
  }
  in_read.reset();
  out_write.reset();

  std::string problem;
  {
    BlockSigpipe guard;
    problem = pump(in_write, input, out_read, res.output, deadline);
  }
  in_write.reset();
  out_read.reset();

  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      res.error = errno_text("waitpid", errno);
      return res;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      res.timed_out = true;
      res.signal = SIGKILL;
      res.error = str("timed out after ", o.timeout_s, " s and was killed");
      return res;
    }
    // No portable way to wait on a pid with a timeout; the child usually is done already.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
  if (problem == "timed out") problem.clear();  // it exited by itself meanwhile: only the exit counts
  res.error = problem;
  return res;
}

}  // namespace loom::sys
