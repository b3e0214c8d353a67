#include "alerts.h"

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/error.h"
#include "loom/json_text.h"
#include "loom/log.h"
#include "loom/net.h"
#include "loom/process.h"

namespace loom {

namespace {

using Clock = std::chrono::steady_clock;

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
  return sys::http_post(url, "application/json", json, timeout_s);
}

std::string run_command_with_input(const std::string& command, const std::string& input, double timeout_s) {
  sys::ProcessOptions o;
  o.timeout_s = timeout_s;
  const sys::ProcessResult r = sys::run_process({"/bin/sh", "-c", command}, input, o);
  if (r.timed_out) return str("alert command timed out after ", timeout_s, " s and was killed: ", command);
  if (!r.error.empty()) return str("alert command: ", r.error, ": ", command);
  if (r.exit_code == 0) return "";
  if (r.exit_code > 0) return str("alert command exited with ", r.exit_code, ": ", command);
  return str("alert command killed by signal ", r.signal, ": ", command);
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

void AlertOptions::validate() const {
  LOOM_CHECK(timeout_s > 0, "monitor.alert_timeout_s must be > 0, got ", timeout_s);
  LOOM_CHECK(queue_capacity > 0, "the alert queue capacity must be > 0");
}

Alerts::Alerts(AlertOptions o, int rank, std::string host) : o_(std::move(o)), rank_(rank), host_(std::move(host)) {
  o_.validate();
  if (!o_.webhook.empty()) {
    sys::HttpUrl u;
    const std::string bad = sys::parse_http_url(o_.webhook, u);
    LOOM_CHECK(bad.empty(), "monitor.alert_webhook '", o_.webhook, "': ", bad,
               o_.webhook.rfind("https://", 0) == 0 ? ": use an http:// relay, or monitor.alert_command with curl" : "");
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
    // The event itself is logged once by whoever raised it (the loop, the watchdog, main()'s error
    // line): an alert only delivers it.
    if (!state_) return;
    log::debug("alert queued: [", title, "] (", alert_level_name(level), ")");
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
