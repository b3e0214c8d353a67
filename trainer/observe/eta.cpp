#include "eta.h"

namespace loom {

void EtaEstimator::on_record(int64_t step, double now, double step_time) {
  if (first_step_ < 0) {
    first_step_ = step;
    first_time_ = now;
    first_step_time_ = step_time;
    validation_s_ = 0;  // what came before the first record is start-up, not the run's pace
  }
  last_step_ = step;
  last_time_ = now;
}

void EtaEstimator::on_validation(double seconds) {
  if (first_step_ >= 0) validation_s_ += seconds;
  validation_total_s_ += seconds;
  ++validations_;
}

double EtaEstimator::per_step() const {
  if (first_step_ < 0) return -1;
  if (last_step_ <= first_step_) return first_step_time_;
  const double train_s = last_time_ - first_time_ - validation_s_;
  return (train_s > 0 ? train_s : 0) / static_cast<double>(last_step_ - first_step_);
}

double EtaEstimator::per_validation() const {
  if (validations_ > 0) return validation_total_s_ / static_cast<double>(validations_);
  const double step = per_step();
  if (step < 0 || o_.micro_num <= 0) return 0;
  return step / static_cast<double>(o_.micro_num) * o_.validation_micro_batches / 3.0;
}

int64_t EtaEstimator::validations_left(int64_t step) const {
  if (!o_.validates || step >= o_.total_steps) return 0;
  int64_t periodic = 0;
  if (o_.valid_every > 0) {  // multiples v of valid_every with step <= v < total_steps, v > 0
    const int64_t from = step > 1 ? step : 1, last = o_.total_steps - 1;
    if (last >= from) periodic = last / o_.valid_every - (from - 1) / o_.valid_every;
  }
  return periodic + 1;  // the final validation at total_steps
}

double EtaEstimator::eta(int64_t step) const {
  if (first_step_ < 0 || step >= o_.total_steps) return -1;
  return per_step() * static_cast<double>(o_.total_steps - step) +
         static_cast<double>(validations_left(step)) * per_validation();
}

}  // namespace loom
