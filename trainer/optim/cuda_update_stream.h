// The replicated optimizer's update on a side stream, overlapped with the next step's forward.
//
// AdamW moves 28 bytes per parameter (fp32 master, both moments, the bf16 gradient and weight):
// on one H200 that is ~12 ms of a 1b step and ~50 ms of a 7B one, with the rest of the GPU idle.
// The update of step N needs all of step N's gradients (the global norm clips them), but the
// forward of step N+1 needs only the weights of the layer it is in. So the update runs unit by
// unit in the forward's order, on its own stream: unit 0 holds the weights outside the decoder
// layers (embedding, final norm, head), unit 1 + K layer K. An event marks each unit's end, and
// the forward waits on it (LayerHooks) just before it uses the unit, while the later units'
// updates run beside it. The kernels and their arguments are those of the update in place, so
// the weights and moments are bitwise the same.
//
// Whoever reads the weights or the optimizer state other than through the forward (a checkpoint,
// a resume) calls settle() first. CUDA builds only (cuda_*.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include <torch/torch.h>

#include "layer_hooks.h"

namespace loom::cuda {

class UpdateStream : public LayerHooks {
 public:
  // num_layers decoder layers: num_layers + 1 units.
  UpdateStream(int device, int64_t num_layers);
  ~UpdateStream() override;
  UpdateStream(const UpdateStream&) = delete;
  UpdateStream& operator=(const UpdateStream&) = delete;

  // update(u) for every unit in order, each launched with the side stream current and after all
  // work queued so far on the caller's stream (the backward that made the gradients). Returns
  // once the host has queued them all.
  void run(const std::function<void(int64_t unit)>& update);
  // t, allocated on another stream, may be freed by the caller: its memory is not reused before
  // the side stream has run the work queued so far.
  void keep_until_done(const torch::Tensor& t);
  // The caller's stream waits for every unit still pending, and the host for the side stream.
  void settle() const;

  // Tests: the side stream first spins this many GPU clock cycles in every run(), so that the
  // update is still running when the next forward starts (a small model's would be done at once).
  void delay_for_tests(int64_t cycles) { delay_cycles_ = cycles; }

  void begin_forward() override;              // waits for unit 0
  void before_layer(int64_t layer) override;  // waits for unit 1 + layer
  void after_layer(int64_t, const std::vector<torch::Tensor>&) override {}

 private:
  void wait(int64_t unit) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t delay_cycles_ = 0;
};

}  // namespace loom::cuda
