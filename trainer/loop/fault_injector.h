// debug.*: TEST ONLY faults that the fault-tolerance tests provoke (docs/MONITOR.md). The loop calls
// every hook at its named point; each is a no-op unless its debug key names the current step, so
// the loop carries no debug branches of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config.h"
#include "layer_hooks.h"
#include "stop_signal.h"

namespace loom {

class FaultInjector {
 public:
  explicit FaultInjector(const DebugOptions& o) : o_(o) {}

  // Between steps, with `step` steps done: debug.stop_at_step acts as a SIGTERM.
  bool stop_requested(int64_t step) const { return step == o_.stop_at_step; }
  // Between steps, with `step` steps done: debug.pause_at_step logs that it waits, then blocks until
  // SIGTERM or SIGINT arrives, so a test can signal a run at a known step without racing it.
  void pause(int64_t step, const StopSignal& signal) const;
  // At the start of the step's forward: debug.kill_at_step SIGKILLs (unless debug.kill_at_layer
  // names a layer), debug.hang_at_step never returns.
  void in_forward(int64_t step) const;
  // Before a layer's forward: debug.kill_at_step with debug.kill_at_layer SIGKILLs.
  void before_layer(int64_t step, int64_t layer) const;
  bool kills_in_layers() const { return o_.kill_at_layer >= 0; }
  // After the step's backward: debug.inject_nan_step makes every gradient NaN.
  void after_backward(int64_t step, const std::vector<torch::Tensor>& params) const;
  // The loss the spike detector sees: debug.spike_at_step makes it 100x larger.
  double observed_loss(int64_t step, double loss) const { return step == o_.spike_at_step ? loss * 100 : loss; }
  // Inside rank 0's save, before its files (on the writer thread of an asynchronous save):
  // debug.kill_in_save leaves a half-written checkpoint (the model file in tmp_dir, no manifest)
  // and SIGKILLs.
  void in_save(int64_t step, const std::string& tmp_dir, const safetensors::NamedTensors& model) const;
  // In every rank's part of a save (its optimizer shard): debug.fail_save_at_step throws loom::Error.
  void in_shard_write(int64_t step) const;

 private:
  DebugOptions o_;
};

// Between the model and the update's layer hooks (or none): plays FaultInjector::before_layer.
class FaultLayerHooks : public LayerHooks {
 public:
  // step: the loop's count of steps done, read at each layer.
  FaultLayerHooks(const FaultInjector& faults, const int64_t& step, LayerHooks* inner)
      : faults_(faults), step_(step), inner_(inner) {}
  void begin_forward() override {
    if (inner_) inner_->begin_forward();
  }
  void before_layer(int64_t layer) override {
    if (torch::GradMode::is_enabled()) faults_.before_layer(step_, layer);  // training, not validation
    if (inner_) inner_->before_layer(layer);
  }
  void after_layer(int64_t layer, const std::vector<torch::Tensor>& outputs) override {
    if (inner_) inner_->after_layer(layer, outputs);
  }

 private:
  const FaultInjector& faults_;
  const int64_t& step_;
  LayerHooks* inner_;
};

}  // namespace loom
