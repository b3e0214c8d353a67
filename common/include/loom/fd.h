// Descriptor helpers for code that reports failures as text instead of throwing (an alert delivery
// must never throw into the training loop): an owned descriptor, errno's text, and a poll bounded by
// a deadline. Code that may throw uses sys::File (sys.h).
#pragma once

#include <chrono>
#include <string>

namespace loom::sys {

using Deadline = std::chrono::steady_clock::time_point;

// now + seconds.
Deadline deadline_after(double seconds);

// "CALL: strerror(err)".
std::string errno_text(const char* call, int err);

// An owned descriptor, closed on every path.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset();

 private:
  int fd_ = -1;
};

// Waits until fd is ready for `events` (POLLIN, POLLOUT) or the deadline passes (EINTR retried).
// "" when ready, "timed out waiting to WHAT" or poll's error otherwise.
std::string wait_fd(int fd, short events, Deadline deadline, const char* what);

}  // namespace loom::sys
