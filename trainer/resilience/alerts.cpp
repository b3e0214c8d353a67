#include "alerts.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/error.h"
#include "loom/json_text.h"
#include "loom/log.h"

extern char** environ;

namespace loom {

namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(const char* call, int err) { return str(call, ": ", std::strerror(err)); }

// Milliseconds left until deadline, at least 0 (poll's timeout).
int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// An owned descriptor that the delivery code closes on every path. Delivery reports failures as text
// (an alert must never throw into the loop), so the raw calls are checked here, not via sys::.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Url {
  std::string host, port = "80", path = "/";
};

// Parses "http://host[:port][/path]" (IPv6 as [addr]); "" on success, else the problem.
std::string parse_url(const std::string& url, Url& u) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    return "https:// is not supported (loom has no TLS): use an http:// relay, or monitor.alert_command "
           "with curl";
  if (url.rfind(scheme, 0) != 0) return "the URL must start with http://";
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) u.path = rest.substr(slash);
  if (authority.empty()) return "no host in the URL";
  if (authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return "unterminated [IPv6] host";
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return "junk after the [IPv6] host";
      u.port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.find(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) u.port = authority.substr(colon + 1);
  }
  if (u.host.empty()) return "no host in the URL";
  if (u.port.empty() || u.port.find_first_not_of("0123456789") != std::string::npos || u.port.size() > 5 ||
      std::stoi(u.port) == 0 || std::stoi(u.port) > 65535)
    return "bad port '" + u.port + "'";
  return "";
}

// Waits until fd is ready for `events` or the deadline passes.
std::string wait_fd(int fd, short events, Clock::time_point deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return "";
    if (n == 0) return str("timed out waiting to ", what);
    if (errno != EINTR) return errno_text("poll", errno);
  }
}

std::string iso_utc(double unix_time) {
  const std::time_t t = static_cast<std::time_t>(unix_time);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

const char* alert_level_name(AlertLevel level) {
  switch (level) {
    case AlertLevel::kInfo: return "info";
    case AlertLevel::kWarn: return "warn";
    case AlertLevel::kError: return "error";
  }
  return "?";
}

std::string alert_json(AlertLevel level, const std::string& title, const std::string& body, int rank,
                       const std::string& host, int64_t step, double unix_time) {
  return str("{\"level\": ", json_quote(alert_level_name(level)), ", \"title\": ", json_quote(title),
             ", \"body\": ", json_quote(body), ", \"rank\": ", rank, ", \"host\": ", json_quote(host),
             ", \"step\": ", step, ", \"time\": ", json_quote(iso_utc(unix_time)), "}");
}

std::string exception_alert_body(const std::string& what, int rank, const std::string& host, int64_t step,
                                 size_t max_lines) {
  // The last lines carry the cause (LibTorch puts its backtrace first, loom's context last).
  std::vector<std::string> lines;
  size_t b = 0;
  while (b <= what.size()) {
    const size_t e = what.find('\n', b);
    lines.push_back(what.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  const size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  std::string tail = first > 0 ? "..." : "";
  for (size_t i = first; i < lines.size(); ++i) {
    if (i > first || first > 0) tail += '\n';
    tail += lines[i];
  }
  return str("rank ", rank, " on ", host, " at step ", step, ":\n", tail);
}

std::string http_post_json(const std::string& url, const std::string& json, double timeout_s) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  Url u;
  if (std::string bad = parse_url(url, u); !bad.empty()) return bad;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  // Name resolution has no timeout of its own: an IP address resolves without the network.
  if (int rc = ::getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &res); rc != 0)
    return str("resolving ", u.host, ": ", ::gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(res, ::freeaddrinfo);

  Fd sock;
  std::string last_error = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (s.get() < 0) {
      last_error = errno_text("socket", errno);
      continue;
    }
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = errno_text("connect", errno);
      continue;
    }
    if (std::string w = wait_fd(s.get(), POLLOUT, deadline, "connect"); !w.empty()) {
      last_error = w;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      last_error = errno_text("connect", err);
      continue;
    }
    sock = Fd(s.release());
    break;
  }
  if (sock.get() < 0) return str("POST ", url, ": ", last_error);

  const std::string host_header = u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host;
  const std::string request = str("POST ", u.path, " HTTP/1.1\r\nHost: ", host_header, ":", u.port,
                                  "\r\nContent-Type: application/json\r\nContent-Length: ", json.size(),
                                  "\r\nConnection: close\r\nUser-Agent: loom-train\r\n\r\n", json);
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(sock.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (std::string w = wait_fd(sock.get(), POLLOUT, deadline, "send"); !w.empty()) return str("POST ", url, ": ", w);
    } else {
      return str("POST ", url, ": ", errno_text("send", errno));
    }
  }
  // The status line is all we need: "HTTP/1.1 200 OK\r\n".
  std::string answer;
  while (answer.find("\r\n") == std::string::npos && answer.size() < 4096) {
    if (std::string w = wait_fd(sock.get(), POLLIN, deadline, "receive the answer"); !w.empty())
      return str("POST ", url, ": ", w);
    char buf[512];
    const ssize_t n = ::recv(sock.get(), buf, sizeof buf, 0);
    if (n > 0) {
      answer.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return str("POST ", url, ": ", errno_text("recv", errno));
    }
  }
  const std::string status_line = answer.substr(0, answer.find("\r\n"));
  const size_t sp = status_line.find(' ');
  if (status_line.rfind("HTTP/", 0) != 0 || sp == std::string::npos)
    return str("POST ", url, ": not an HTTP answer: '", status_line.substr(0, 80), "'");
  const int code = std::atoi(status_line.c_str() + sp + 1);
  if (code < 200 || code > 299) return str("POST ", url, ": ", status_line);
  return "";
}

std::string run_command_with_input(const std::string& command, const std::string& input, double timeout_s) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno_text("pipe2", errno);
  Fd read_end(fds[0]), write_end(fds[1]);

  // posix_spawn, not fork: safe in a multi-threaded process. The child gets the pipe as stdin and
  // its own process group, so a timeout kills the shell and whatever it started.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, read_end.get(), STDIN_FILENO);
  ::posix_spawnattr_init(&attr);
  ::posix_spawnattr_setpgroup(&attr, 0);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  ::posix_spawnattr_setsigmask(&attr, &none);  // not the delivery thread's mask
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::string sh_command = command;
  char* argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"), sh_command.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  if (rc != 0) return errno_text("posix_spawn /bin/sh", rc);
  read_end.reset();

  std::string problem;
  if (::fcntl(write_end.get(), F_SETFL, O_NONBLOCK) != 0) problem = errno_text("fcntl", errno);
  // The command may exit without reading: the write then fails with EPIPE. Its SIGPIPE (directed at
  // this thread) is blocked meanwhile and discarded, so it cannot kill the trainer.
  sigset_t pipe_set, old_mask;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
  bool got_epipe = false;
  for (size_t sent = 0; problem.empty() && sent < input.size();) {
    const ssize_t n = ::write(write_end.get(), input.data() + sent, input.size() - sent);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      problem = wait_fd(write_end.get(), POLLOUT, deadline, "write the alert to the command");
    } else {
      got_epipe = errno == EPIPE;
      if (!got_epipe) problem = errno_text("write to the command", errno);
      break;
    }
  }
  if (got_epipe && !sigismember(&old_mask, SIGPIPE)) {
    const timespec zero{0, 0};
    while (::sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  write_end.reset();  // EOF for the command

  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return errno_text("waitpid", errno);
    if (Clock::now() >= deadline) {
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return str("alert command timed out after ", timeout_s, " s and was killed: ", command);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!problem.empty()) return problem;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status)) return str("alert command exited with ", WEXITSTATUS(status), ": ", command);
  return str("alert command killed by signal ", WTERMSIG(status), ": ", command);
}

// ---- Alerts ----

struct Alerts::State {
  AlertOptions o;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> queue;  // JSON objects
  bool closing = false;
  bool in_flight = false;
  bool finished = false;  // the worker has returned
  Clock::time_point close_deadline;
  std::atomic<uint64_t> dropped{0}, delivered{0}, failed{0};
};

Alerts::Alerts(AlertOptions o, int rank, std::string host) : o_(std::move(o)), rank_(rank), host_(std::move(host)) {
  LOOM_CHECK(o_.timeout_s > 0, "monitor.alert_timeout_s must be > 0, got ", o_.timeout_s);
  LOOM_CHECK(o_.queue_capacity > 0, "the alert queue capacity must be > 0");
  if (!o_.webhook.empty()) {
    Url u;
    const std::string bad = parse_url(o_.webhook, u);
    LOOM_CHECK(bad.empty(), "monitor.alert_webhook '", o_.webhook, "': ", bad);
  }
  if (o_.webhook.empty() && o_.command.empty()) return;  // log only: no thread
  state_ = std::make_shared<State>();
  state_->o = o_;
  std::thread([s = state_] { deliver_loop(s); }).detach();
}

Alerts::~Alerts() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->closing = true;
  state_->close_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.timeout_s + 1.0));
  state_->cv.notify_all();
  // Deliveries started after close_deadline are abandoned; one in flight ends within its own
  // timeout. The thread owns a reference to the state, so it may outlive us if it must.
  const bool done = state_->cv.wait_until(lock, state_->close_deadline + std::chrono::milliseconds(500),
                                          [&] { return state_->finished; });
  if (!done || !state_->queue.empty())
    log::warn("alerts: ", state_->queue.size(), " alert(s) not delivered at shutdown");
}

void Alerts::send(AlertLevel level, const std::string& title, const std::string& body) noexcept {
  try {
    const int64_t step = step_.load(std::memory_order_relaxed);
    const std::string line = str("ALERT [", title, "] ", body);
    switch (level) {
      case AlertLevel::kInfo: log::info(line); break;
      case AlertLevel::kWarn: log::warn(line); break;
      case AlertLevel::kError: log::error(line); break;
    }
    if (!state_) return;
    std::string json = alert_json(level, title, body, rank_, host_, step, now_unix());
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->queue.size() >= o_.queue_capacity || state_->closing) {
      ++state_->dropped;
      return;
    }
    state_->queue.push_back(std::move(json));
    state_->cv.notify_all();
  } catch (...) {
    // Out of memory while formatting: an alert is never worth an exception in the loop.
  }
}

void Alerts::send_exception(const std::string& what) noexcept {
  try {
    send(AlertLevel::kError, str("exception on rank ", rank_),
         exception_alert_body(what, rank_, host_, step_.load(std::memory_order_relaxed)));
  } catch (...) {
  }
}

bool Alerts::flush(double timeout_s) {
  if (!state_) return true;
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                             [&] { return (state_->queue.empty() && !state_->in_flight) || state_->finished; });
}

uint64_t Alerts::dropped() const { return state_ ? state_->dropped.load() : 0; }
uint64_t Alerts::delivered() const { return state_ ? state_->delivered.load() : 0; }
uint64_t Alerts::failed() const { return state_ ? state_->failed.load() : 0; }

void Alerts::deliver_loop(const std::shared_ptr<State>& s) {
  // A command that exits without reading stdin must not SIGPIPE the whole trainer.
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &block, nullptr);

  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [&] { return s->closing || !s->queue.empty(); });
    if (s->queue.empty()) break;  // closing and drained
    double timeout = s->o.timeout_s;
    if (s->closing) {
      const double left = std::chrono::duration<double>(s->close_deadline - Clock::now()).count();
      if (left <= 0) break;
      timeout = std::min(timeout, left);
    }
    std::string json = std::move(s->queue.front());
    s->queue.pop_front();
    s->in_flight = true;
    lock.unlock();
    for (int target = 0; target < 2; ++target) {
      const std::string& where = target == 0 ? s->o.webhook : s->o.command;
      if (where.empty()) continue;
      const std::string err = target == 0 ? http_post_json(where, json, timeout)
                                          : run_command_with_input(where, json + "\n", timeout);
      if (err.empty()) {
        ++s->delivered;
      } else {
        ++s->failed;
        log::warn("alert not delivered: ", err);
      }
    }
    lock.lock();
    s->in_flight = false;
    s->cv.notify_all();
  }
  s->finished = true;
  s->cv.notify_all();
}

}  // namespace loom
