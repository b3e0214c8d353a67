#include "fault_injector.h"

#include <csignal>
#include <thread>

#include "loom/error.h"
#include "loom/log.h"

namespace loom {

void FaultInjector::pause(int64_t step, const StopSignal& signal) const {
  if (step != o_.pause_at_step) return;
  log::warn("debug.pause_at_step: ", step, " steps done, waiting for a signal");
  signal.wait();
}

void FaultInjector::in_forward(int64_t step) const {
  if (step == o_.kill_at_step && o_.kill_at_layer < 0) std::raise(SIGKILL);
  while (step == o_.hang_at_step) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void FaultInjector::before_layer(int64_t step, int64_t layer) const {
  if (step == o_.kill_at_step && layer == o_.kill_at_layer) std::raise(SIGKILL);
}

void FaultInjector::after_backward(int64_t step, const std::vector<torch::Tensor>& params) const {
  if (step != o_.inject_nan_step) return;
  torch::NoGradGuard g;
  for (const torch::Tensor& p : params)
    if (p.grad().defined()) p.mutable_grad().fill_(std::nan(""));
}

void FaultInjector::in_save(int64_t step, const std::string& tmp_dir, const safetensors::NamedTensors& model) const {
  if (step != o_.kill_in_save) return;
  safetensors::write(tmp_dir + "/model.safetensors", model);
  log::warn("debug.kill_in_save: SIGKILL inside the save of step ", step);
  std::raise(SIGKILL);
}

void FaultInjector::in_shard_write(int64_t step) const {
  LOOM_CHECK(step != o_.fail_save_at_step, "debug.fail_save_at_step: injected failure in this rank's save of step ", step);
}

}  // namespace loom
