// The hang watchdog (monitor.hang_timeout): a thread per rank that fires when no step completes
// within hang_timeout seconds. What it watches is the training loop's thread: the loop's heartbeat
// after each step, the phase it names as it goes (slot 0, "main": "data", "forward_backward",
// "reduce", "optimizer", ...) and its LongPhase guards. When it fires it logs the phase of every
// slot and for how long, sends an error alert, and ends the process with loom::kExitHang (4,
// loom/cli.h), so the launcher restarts the job from its last checkpoint. Other threads could
// register slots of their own (add_slot), but none does today: the data loader and the background
// checkpoint writer are not watched themselves; a stall of theirs shows as the loop's phase
// ("data", or "checkpoint" while a save waits for the previous write).
//
// Exiting here is the one sanctioned exit outside main(): the hung thread (usually blocked inside a
// collective or a device call) cannot be unwound, so nothing could ever catch an exception thrown
// at it. hang_exit() flushes stdio and calls std::_Exit: no destructors, no atexit handlers (they
// could block on the same hung resource).
//
// The start-up rule: everything before the first step (the Loop's construction, which indexes the
// data and verifies its checksums, then Loop::start's phases) runs under a StartupPhase, a
// LongPhase named "start-up" without a bound: how long a start takes grows with the data (the
// checksums of 8.6 GB of packs: seconds) and a resume's checkpoint, not with a step, so
// hang_timeout never applies to it. The step clock starts when start-up ends.
//
// Known-long phases (validation, a synchronous checkpoint save, the start-up probe) run under a
// Watchdog::LongPhase guard: the phase is named and gets its own timeout (0 = unbounded) instead of
// hang_timeout, and the step clock restarts when the guard ends. Chosen over a plain pause because a
// save that blocks forever on a dead filesystem or a collective is exactly the hang to catch, and
// over fixed per-phase timeouts because only the caller knows how long its phase may take.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/cli.h"

namespace loom {

class Alerts;

// Flushes stdout/stderr and ends the process with kExitHang at once (std::_Exit).
[[noreturn]] void hang_exit();

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // hang_timeout_s > 0 (callers skip creating one when monitor.hang_timeout is 0). alerts may be
  // null. The thread starts at once; the clock starts now, so whatever runs before the first step
  // must be under a StartupPhase (the trainer's start-up is, from the Loop's construction on).
  explicit Watchdog(double hang_timeout_s, Alerts* alerts = nullptr);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Called by the loop after each completed step: restarts the clock.
  void heartbeat(int64_t step);
  // The loop's (slot 0, "main") current phase.
  void set_phase(const std::string& phase) { set_phase(0, phase); }

  // A slot for another thread, which then sets its own phase; the report lists every slot. Returns
  // the slot id. Only tests call it today: the trainer's threads besides the loop have no slot.
  int add_slot(const std::string& thread_name);
  void set_phase(int slot, const std::string& phase);

  // Runs before the exit with the report (e.g. Communicator::report_failure so the other ranks name
  // this one), on a thread of its own: the exit waits for it at most budget_s (a store that cannot be
  // reached must not keep a hung rank alive). Exceptions are swallowed.
  void set_on_hang(std::function<void(const std::string& report)> f, double budget_s = 10);

  // The text the watchdog logs when it fires (also for tests and a SIGUSR1-style dump).
  std::string report() const;

  // While alive, the main slot's phase is `phase` and the watchdog fires only if it lasts longer than
  // timeout_s (0 = never). On destruction the previous phase comes back and the step clock restarts.
  // Guards do not nest across threads: use them from the loop's thread.
  class LongPhase {
   public:
    LongPhase(Watchdog* w, const std::string& phase, double timeout_s = 0);  // w may be null
    ~LongPhase();
    LongPhase(const LongPhase&) = delete;
    LongPhase& operator=(const LongPhase&) = delete;

   private:
    Watchdog* w_;
    std::string previous_phase_;
    double previous_timeout_s_;
  };

  // The start-up rule (above), one guard per stretch of start-up code.
  class StartupPhase : public LongPhase {
   public:
    static constexpr const char* kName = "start-up";
    static constexpr double kTimeoutS = 0;  // none
    explicit StartupPhase(Watchdog* w) : LongPhase(w, kName, kTimeoutS) {}
  };

  double hang_timeout_s() const { return timeout_s_; }
  // When the watchdog fires unless a heartbeat or a phase change comes first: the last beat (or the
  // start of the current LongPhase) plus the active timeout; Clock::time_point::max() in an
  // unbounded LongPhase. The watchdog's thread fires once Clock::now() passes it.
  Clock::time_point deadline() const;

 private:
  struct Slot {
    std::string thread;
    std::string phase;
    Clock::time_point since;
  };
  void run();
  [[noreturn]] void fire();
  Clock::time_point deadline_locked() const;

  const double timeout_s_;
  Alerts* alerts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  int64_t last_step_ = -1;
  Clock::time_point last_beat_;
  double active_timeout_s_;  // timeout_s_, or a LongPhase's
  bool stop_ = false;
  std::function<void(const std::string&)> on_hang_;
  double on_hang_budget_s_ = 10;
  std::thread thread_;
};

}  // namespace loom
