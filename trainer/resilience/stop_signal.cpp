#include "stop_signal.h"

#include <cerrno>

#include "loom/sys.h"

namespace loom {

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) { g_signal = sig; }
}  // namespace

StopSignal::StopSignal() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGTERM, &sa, &old_term_) != 0) sys::throw_errno("sigaction", "SIGTERM", errno);
  if (::sigaction(SIGINT, &sa, &old_int_) != 0) sys::throw_errno("sigaction", "SIGINT", errno);
}

StopSignal::~StopSignal() {
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGINT, &old_int_, nullptr);
}

bool StopSignal::requested() const { return g_signal != 0; }
int StopSignal::signal_number() const { return g_signal; }

}  // namespace loom
