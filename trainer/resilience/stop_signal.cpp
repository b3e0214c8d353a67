#include "stop_signal.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "loom/sys.h"

namespace loom {

namespace {
volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_wake_fd = -1;
extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  const int saved = errno;  // write() is async-signal-safe; errno must survive the handler
  if (g_wake_fd >= 0) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(g_wake_fd, &byte, 1);
  }
  errno = saved;
}
}  // namespace

StopSignal::StopSignal() {
  g_signal = 0;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) sys::throw_errno("pipe2", "stop signal", errno);
  read_ = sys::Fd(fds[0]);
  write_ = sys::Fd(fds[1]);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGTERM, &sa, &old_term_) != 0) sys::throw_errno("sigaction", "SIGTERM", errno);
  if (::sigaction(SIGINT, &sa, &old_int_) != 0) sys::throw_errno("sigaction", "SIGINT", errno);
  g_wake_fd = write_.get();
}

StopSignal::~StopSignal() {
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGINT, &old_int_, nullptr);
  g_wake_fd = -1;
}

void StopSignal::wait() const {
  while (g_signal == 0) {
    pollfd p{read_.get(), POLLIN, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) sys::throw_errno("poll", "stop signal", errno);
  }
}

bool StopSignal::requested() const { return g_signal != 0; }
int StopSignal::signal_number() const { return g_signal; }

}  // namespace loom
