// The time left of a training run, one estimate for every line that shows it. Validation is
// counted apart from the steps: a validation pass takes far longer than a step, so a mean time per
// step that folds in the validations seen so far is too low before the first one and too high
// right after it. Instead:
//
//   eta = per_step * (total_steps - step) + validations_left(step) * per_validation
//
//   per_step        the wall time between the first record and now, less the validations in it,
//                   over the steps in between (checkpoint saves and logging stay inside); from the
//                   first record alone, that step's step_time
//   validations_left the periodic validations at multiples of valid_every in [step, total_steps)
//                   (a record comes before its step's validation) plus the final one, if any
//   per_validation  the mean of the validations measured; before the first one, the forward
//                   passes it will run at a third of a training micro-batch each (forward and
//                   backward cost about three forwards): per_step / micro_num * batches / 3
//
// Times are seconds on any one clock the caller picks (the loop: steady_clock; tests: made up).
#pragma once

#include <cstdint>

namespace loom {

struct EtaOptions {
  int64_t total_steps = 0;
  int64_t valid_every = 0;               // 0: no periodic validation
  bool validates = false;                // a validation set exists (periodic and final passes)
  int64_t micro_num = 1;                 // micro-batches per step
  double validation_micro_batches = 0;   // forward micro-batches of one validation pass, this rank
};

class EtaEstimator {
 public:
  explicit EtaEstimator(const EtaOptions& o) : o_(o) {}

  // A training record at `step` (steps done) at time `now`; step_time: that step's own seconds.
  void on_record(int64_t step, double now, double step_time);
  // A finished validation pass took `seconds` (an interrupted one is not reported).
  void on_validation(double seconds);
  // Seconds left after `step`, as of the last record; < 0 before any record and from the last step on.
  double eta(int64_t step) const;

  int64_t validations_left(int64_t step) const;
  double per_step() const;        // < 0 before any record
  double per_validation() const;  // the measured mean, else the estimate above

 private:
  EtaOptions o_;
  int64_t first_step_ = -1, last_step_ = -1;
  double first_time_ = 0, last_time_ = 0, first_step_time_ = 0;
  double validation_s_ = 0;          // validation time since the first record
  double validation_total_s_ = 0;    // every pass measured
  int64_t validations_ = 0;
};

}  // namespace loom
