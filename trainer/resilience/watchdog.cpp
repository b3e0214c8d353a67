#include "watchdog.h"

#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <iomanip>
#include <sstream>

#include "alerts.h"
#include "loom/error.h"
#include "loom/log.h"

namespace loom {

void hang_exit() {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kExitHang);
}

Watchdog::Watchdog(double hang_timeout_s, Alerts* alerts)
    : timeout_s_(hang_timeout_s), alerts_(alerts), active_timeout_s_(hang_timeout_s) {
  LOOM_CHECK(hang_timeout_s > 0, "monitor.hang_timeout must be > 0 for a watchdog, got ", hang_timeout_s);
  const Clock::time_point now = Clock::now();
  slots_.push_back({"main", "start", now});
  last_beat_ = now;
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::heartbeat(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  last_step_ = step;
  last_beat_ = Clock::now();
}

int Watchdog::add_slot(const std::string& thread_name) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.push_back({thread_name, "idle", Clock::now()});
  return static_cast<int>(slots_.size()) - 1;
}

void Watchdog::set_phase(int slot, const std::string& phase) {
  std::lock_guard<std::mutex> lock(mu_);
  LOOM_ASSERT(slot >= 0 && slot < static_cast<int>(slots_.size()), "watchdog slot ", slot, " not registered");
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.phase == phase) return;  // same phase: keep its start time
  s.phase = phase;
  s.since = Clock::now();
}

void Watchdog::set_on_hang(std::function<void(const std::string&)> f, double budget_s) {
  std::lock_guard<std::mutex> lock(mu_);
  on_hang_ = std::move(f);
  on_hang_budget_s_ = budget_s;
}

std::string Watchdog::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  os << "no step completed for " << std::chrono::duration<double>(now - last_beat_).count() << " s (timeout "
     << active_timeout_s_ << " s); last completed step " << last_step_ << ". Threads:";
  for (const Slot& s : slots_)
    os << "\n  " << s.thread << ": phase '" << s.phase << "' for " << std::chrono::duration<double>(now - s.since).count()
       << " s";
  return os.str();
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Check often enough to fire within ~10% of the timeout (and at least every second).
    const double poll_s = std::min(1.0, std::max(0.01, timeout_s_ / 10));
    cv_.wait_for(lock, std::chrono::duration<double>(poll_s), [&] { return stop_; });
    if (stop_) return;
    if (Clock::now() > deadline_locked()) {
      lock.unlock();
      fire();
    }
  }
}

Watchdog::Clock::time_point Watchdog::deadline_locked() const {
  if (active_timeout_s_ <= 0) return Clock::time_point::max();  // a LongPhase without a bound
  return last_beat_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(active_timeout_s_));
}

Watchdog::Clock::time_point Watchdog::deadline() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deadline_locked();
}

void Watchdog::fire() {
  const std::string text = "hang detected: " + report();
  log::error(text, "; exiting with code ", kExitHang, " so the launcher can restart from the last checkpoint");
  std::function<void(const std::string&)> on_hang;
  double budget_s = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_hang = on_hang_;
    budget_s = on_hang_budget_s_;
  }
  if (on_hang) {
    // Detached: if the hook blocks past its budget, the process ends under it anyway.
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    std::thread([on_hang, text, done] {
      try {
        on_hang(text);
      } catch (...) {
      }
      done->set_value();
    }).detach();
    if (finished.wait_for(std::chrono::duration<double>(budget_s)) != std::future_status::ready)
      log::error("the on-hang hook did not return within ", budget_s, " s; exiting anyway");
  }
  if (alerts_) {
    alerts_->send(AlertLevel::kError, "hang", text);
    alerts_->flush(alerts_->options().timeout_s + 0.5);  // bounded: deliver before going down
  }
  hang_exit();
}

Watchdog::LongPhase::LongPhase(Watchdog* w, const std::string& phase, double timeout_s)
    : w_(w), previous_timeout_s_(0) {
  if (!w_) return;
  std::lock_guard<std::mutex> lock(w_->mu_);
  Slot& main = w_->slots_[0];
  previous_phase_ = main.phase;
  previous_timeout_s_ = w_->active_timeout_s_;
  main.phase = phase;
  main.since = Clock::now();
  w_->active_timeout_s_ = timeout_s;
  w_->last_beat_ = main.since;  // the long phase's clock
}

Watchdog::LongPhase::~LongPhase() {
  if (!w_) return;
  std::lock_guard<std::mutex> lock(w_->mu_);
  Slot& main = w_->slots_[0];
  main.phase = previous_phase_;
  main.since = Clock::now();
  w_->active_timeout_s_ = previous_timeout_s_;
  w_->last_beat_ = main.since;
}

}  // namespace loom
