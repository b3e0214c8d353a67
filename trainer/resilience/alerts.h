// Alerts: what a person watching a long run must hear about (an exception on any rank, a hang, a
// loss spike, a skipped update, start and finish). The sender logs the event itself, once; with
// monitor.alert_webhook and/or monitor.alert_command the alert delivers it too, as one JSON object
// (docs/MONITOR.md); without either an alert does nothing:
//
//   {"level": "error", "title": "...", "body": "...", "rank": 3, "host": "node7", "step": 1200,
//    "time": "2026-12-02T14:30:00Z"}
//
//   webhook  an HTTP/1.1 POST (Content-Type: application/json) to an http:// URL; a 2xx answer is
//            success. https:// is refused at construction: loom has no TLS (point the webhook at a
//            local relay, or use alert_command with curl).
//   command  run as `/bin/sh -c COMMAND` (own process group) with the JSON on stdin and one line
//            per alert; killed (SIGKILL to its group) when it outlives the timeout.
//
// An alert never blocks or kills training: send() only queues (a bounded queue; when full
// the alert is dropped and counted); one background thread delivers, each delivery bounded by
// timeout_s (connect, send and receive share one deadline). The destructor drains what is queued
// for at most timeout_s + 1 s more, then gives up on the rest.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace loom {

struct AlertOptions {
  std::string webhook;        // monitor.alert_webhook: "http://host[:port][/path]" ("" = off)
  std::string command;        // monitor.alert_command: shell command fed the JSON on stdin ("" = off)
  double timeout_s = 5;       // monitor.alert_timeout_s: bound of one delivery
  size_t queue_capacity = 64; // alerts waiting for delivery; more are dropped (and counted)
  void validate() const;      // throws loom::Error naming the key of a value out of range
};

enum class AlertLevel { kInfo, kWarn, kError };
const char* alert_level_name(AlertLevel level);  // "info" | "warn" | "error"

// One alert as the JSON object above (no trailing newline). time: seconds since the Unix epoch.
std::string alert_json(AlertLevel level, const std::string& title, const std::string& body, int rank,
                       const std::string& host, int64_t step, double unix_time);

// "rank R on HOST at step S: <the last max_lines lines of what>" — the body of an exception alert.
std::string exception_alert_body(const std::string& what, int rank, const std::string& host, int64_t step,
                                 size_t max_lines = 20);

// The two deliveries (sys::http_post of loom/net.h, sys::run_process of loom/process.h with the
// alert's wording), exposed for tests. Both return "" on success, else what went wrong; they never
// throw and return within about timeout_s.
std::string http_post_json(const std::string& url, const std::string& json, double timeout_s);
std::string run_command_with_input(const std::string& command, const std::string& input, double timeout_s);

class Alerts {
 public:
  // Throws loom::Error for a malformed or https:// webhook, or a non-positive timeout.
  Alerts(AlertOptions o, int rank, std::string host);
  ~Alerts();
  Alerts(const Alerts&) = delete;
  Alerts& operator=(const Alerts&) = delete;

  // The step named in later alerts (the loop sets it each step; thread-safe).
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  // Queues the alert for delivery (nothing without a sink). Never blocks on the network, never throws.
  void send(AlertLevel level, const std::string& title, const std::string& body) noexcept;
  // send(kError, "exception on rank R", exception_alert_body(what, ...)).
  void send_exception(const std::string& what) noexcept;
  // Waits until the queue is empty and nothing is in flight, at most timeout_s; true if it is.
  // For the hang watchdog (deliver before exiting) and tests.
  bool flush(double timeout_s);

  bool delivering() const { return static_cast<bool>(state_); }
  uint64_t dropped() const;    // queue full
  uint64_t delivered() const;  // deliveries that succeeded (webhook and command count separately)
  uint64_t failed() const;     // deliveries that failed (each also logged as a warning)
  const AlertOptions& options() const { return o_; }

 private:
  struct State;
  static void deliver_loop(const std::shared_ptr<State>& s);
  AlertOptions o_;
  int rank_;
  std::string host_;
  std::atomic<int64_t> step_{-1};
  std::shared_ptr<State> state_;  // shared with the worker thread (detached if it outlives the drain)
};

}  // namespace loom
