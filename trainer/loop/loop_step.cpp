// The stages of one step, in the order Loop::run calls them (loop.h), and the step's figures,
// validation, save and end of the run.
#include <cmath>

#include "flops.h"
#include "health_check.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "loop.h"
#include "loss.h"
#include "chunked_loss.h"
#include "memory_usage.h"

#ifdef LOOM_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "cuda_memory.h"
#endif

namespace loom {

namespace {

#ifdef LOOM_CUDA_KERNELS
// Where the device memory goes: parameters, gradients, optimizer state, and the rest of the peak.
cuda::MemoryBreakdown memory_breakdown(InternLM& model, const DataParallelUpdate& update, int device) {
  std::vector<torch::Tensor> params, grads, state;
  for (const auto& p : model->parameters()) {
    params.push_back(p);
    grads.push_back(p.grad());
  }
  for (const auto& named : update.replicated_state()) state.push_back(named.second);
  return cuda::memory_breakdown(device, params, grads, state, /*gradients_transient=*/!update.sharded());
}
#endif

// The loss divisor: the label tokens of the whole global batch (every token of it weighs the same;
// gradients are then summed over ranks, data_parallel.h), summed over the ranks while the first
// micro-batch runs its forward. On a host communicator (Gloo) the sum is read and each loss sum
// divided by it, as always. On a CUDA one it stays on the device and each loss sum is multiplied by
// the count's float reciprocal, which is what LibTorch's CUDA division of a float tensor by a host
// double computes (a product with the reciprocal): the same bits, without a read-back.
class LossDivisor {
 public:
  LossDivisor(Communicator& comm, int64_t local) : comm_(comm), local_(local) {
    if (!comm.distributed()) return;
    count_ = torch::full({1}, static_cast<double>(local),
                         torch::TensorOptions().dtype(torch::kFloat64).device(comm.device()));
    pending_ = comm.all_reduce_async(count_);
  }
  // [1] float64 on the communicator's device, the sum over ranks; undefined without one.
  const torch::Tensor& global() const { return count_; }

  torch::Tensor divide(const torch::Tensor& loss_sum) {
    if (!count_.defined()) return loss_sum / static_cast<double>(std::max<int64_t>(local_, 1));
    comm_.wait(pending_);  // the first call only
    if (count_.is_cuda()) {
      if (!inverse_.defined()) inverse_ = count_.clamp_min(1).to(torch::kFloat32).reciprocal().reshape({});
      return loss_sum * inverse_;
    }
    if (host_ < 0) host_ = std::max(count_.item<double>(), 1.0);
    return loss_sum / host_;
  }

 private:
  Communicator& comm_;
  int64_t local_;
  torch::Tensor count_, inverse_;
  Communicator::Pending pending_;
  double host_ = -1;
};

}  // namespace

StepSums Loop::accumulate_gradients(std::vector<Batch>& micro) {
  StepSums s;
  for (const Batch& b : micro) s.loss_tokens += b.num_loss_tokens;  // counted on the host
  LossDivisor divisor(comm_, s.loss_tokens);
  s.global_loss_tokens = divisor.global();
  const int64_t num_datasets = static_cast<int64_t>(data_.datasets().size());
  for (size_t m = 0; m < micro.size(); ++m) {
    Batch& b = micro[m];
    update_->before_backward(m + 1 == micro.size());
    // On CUDA the head and the loss run chunk by chunk (chunked_loss.h): no [B, T, V] fp32 logits.
    LossResult r = device_.is_cuda() ? compute_chunked_loss(model_->hidden_states(b), model_->head_weight(), b,
                                                            c_.loss.label_smoothing, num_datasets)
                                     : compute_loss(model_->forward(b), b, c_.loss.label_smoothing, num_datasets);
    divisor.divide(r.loss_sum).backward();
    auto acc = [](torch::Tensor& into, const torch::Tensor& t) { into = into.defined() ? into + t : t.detach(); };
    acc(s.loss_sum, r.loss_sum.detach());
    acc(s.correct, r.correct);
    acc(s.ds_loss, r.dataset_loss_sum);
    acc(s.ds_tokens, r.dataset_tokens);
    acc(s.ds_correct, r.dataset_correct);
  }
  return s;
}

// The vector's layout: [loss, correct, real tokens, stop (a signal), stop file save, stop file quit,
// executed FLOPs, per-dataset loss/tokens/correct (nd each)], then the loss divisor.
constexpr int64_t kReducedHead = 7;

void Loop::reduce(StepRecord& step, bool stop_here) {
  set_phase("reduce");
  const StepSums& s = step.sums;
  // One small vector, one collective, summed on the communicator's device and left there: the host
  // reads it after the update (end_step), long after the device computed it, so no step waits for
  // it (torchtitan reads its loss only on the steps it logs).
  const int64_t nd = static_cast<int64_t>(data_.datasets().size());
  const torch::Device on = comm_.distributed() ? comm_.device() : device_;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor measured = torch::zeros({2 + 3 * nd}, f64.device(on));
  if (s.loss_sum.defined() && s.ds_loss.defined()) {
    std::vector<torch::Tensor> parts{s.loss_sum.reshape(1), s.correct.reshape(1), s.ds_loss.reshape(nd),
                                     s.ds_tokens.reshape(nd), s.ds_correct.reshape(nd)};
    for (auto& p : parts) p = p.to(torch::kFloat64);
    measured = torch::cat(parts).to(on);
  }
  // Rank 0 reads the stop file for the steps done once this one ends; its decision rides along.
  const StopDecision file = lead_ ? stop_file_.check(step.index + 1, nullptr) : StopDecision{};
  torch::Tensor host = torch::tensor({static_cast<double>(s.real_tokens), stop_here ? 1.0 : 0.0, file.save ? 1.0 : 0.0,
                                      file.quit ? 1.0 : 0.0, s.executed_flops},
                                     f64);
  if (on.is_cuda()) host = host.pin_memory().to(on, /*non_blocking=*/true);  // no wait for the device
  torch::Tensor all = torch::cat({measured.narrow(0, 0, 2), host, measured.narrow(0, 2, 3 * nd)});
  if (comm_.distributed()) comm_.all_reduce(all);
  const torch::Tensor divisor = s.global_loss_tokens.defined()
                                    ? s.global_loss_tokens.to(on)
                                    : torch::full({1}, static_cast<double>(s.loss_tokens), f64.device(on));
  step.sums_on_host.start(torch::cat({all, divisor}));
}

void Loop::read_totals(StepRecord& step) {
  if (step.have_totals) return;
  const torch::Tensor& all = step.sums_on_host.get();
  const int64_t nd = static_cast<int64_t>(data_.datasets().size());
  LOOM_ASSERT(all.numel() == kReducedHead + 3 * nd + 1, "the step's reduced vector holds ", all.numel(), " values");
  const double* v = all.data_ptr<double>();
  StepTotals& t = step.totals;
  t.loss_sum = v[0], t.correct = v[1], t.real_tokens = v[2], t.stop = v[3] > 0, t.executed_flops = v[6];
  t.file.save = v[4] > 0, t.file.quit = v[5] > 0;
  const double* ds = v + kReducedHead;
  t.ds_loss.assign(ds, ds + nd);
  t.ds_tokens.assign(ds + nd, ds + 2 * nd);
  t.ds_correct.assign(ds + 2 * nd, ds + 3 * nd);
  t.loss_tokens = v[kReducedHead + 3 * nd];
  step.have_totals = true;
}

MetricsSetup Loop::metrics_setup() const {
  MetricsSetup m;
  m.total_steps = c_.data.total_steps;
  m.world = static_cast<double>(comm_.world());
  m.tokens_per_device = static_cast<double>(loader_.layout().global_batch() * c_.data.seq_len) / m.world;
  m.flops_per_token = flops_per_token_;
  m.peak_tflops = peak_tflops_;
  m.attention_branches = attention_ == AttentionKernel::kCudnnSegments;
  m.dataset_names = data_.dataset_names();
  m.eta.total_steps = c_.data.total_steps;
  m.eta.valid_every = c_.data.valid_every;
  m.eta.validates = valid_ != nullptr;
  m.eta.micro_num = c_.data.micro_num;
  if (valid_) {  // this rank's forward micro-batches of one pass (evaluator.h's cap per set)
    for (size_t set = 0; set < valid_->num_sets(); ++set) {
      const int64_t all = valid_->num_micro_batches(set), cap = c_.data.valid_micro_num;
      m.eta.validation_micro_batches += static_cast<double>(cap > 0 ? std::min(all, cap) : all);
    }
  }
  return m;
}

void Loop::count_step() {
  if (!lead_) return;
  // The realised mixture of the step's global batch, from the sampler (every rank's rows).
  const uint64_t end = state_.sampler.consumed_samples, g = loader_.layout().global_batch();
  metrics_->count(state_.step, loader_.sampler().count_datasets(end - g, end), attention_use_->per_document.exchange(0),
                  attention_use_->windows.exchange(0));
}

bool Loop::logs_step() const {
  // Every job.log_every steps and the run's last (total_steps; a stop file, a signal or
  // debug.stop_at_step end it here; a validation a stop request interrupts is caught by finish()).
  return state_.step % c_.job.log_every == 0 || state_.step == c_.data.total_steps || stop_agreed_ ||
         quit_by_file_ || faults_.stop_requested(state_.step);
}

bool Loop::times_step() const {
  return logs_step() || (c_.monitor.diag_every > 0 && state_.step % c_.monitor.diag_every == 0);
}

void Loop::log_step(const StepRecord& s) {
  const StepTotals& t = s.totals;
  const OptimizerStepResult& r = s.result;
  const double tokens = std::max(t.loss_tokens, 1.0);
  const double loss = t.loss_sum / tokens;
  summary_.last_loss = loss;
  if (!lead_) return;
  StepFigures f;
  f.step_time = step_t_.seconds();
  f.fields = {
      {"step", static_cast<double>(state_.step)},
      {"consumed_samples", static_cast<double>(state_.sampler.consumed_samples)},
      {"num_consumed_tokens", static_cast<double>(state_.consumed_tokens)},
      {"loss", loss},
      {"acc", t.correct / tokens},
      {"perplexity", std::exp(loss)},
      {"lr", s.lr},
      {"grad_norm", r.grad_norm},
      {"inf_nan_skip_batches", static_cast<double>(state_.inf_nan_skips)},
      {"skip_batches", static_cast<double>(state_.skipped_batches)},
      {"skipped_this_step", r.skipped ? 1.0 : 0.0},
      {"step_time", f.step_time},
      {"data_time", data_t_.seconds()},
      {"fwd_bwd_time", fwd_t_.seconds()},
      {"optimizer_time", opt_t_.seconds()},
      {"peak_memory_mb", static_cast<double>(peak_memory_bytes(device_)) / (1 << 20)},
      {"micro_num", static_cast<double>(c_.data.micro_num)},
  };
#ifdef LOOM_CUDA_KERNELS
  if (device_.is_cuda()) {
    f.fields.emplace_back("peak_reserved_mb",
                          static_cast<double>(cuda::memory_stats(cuda_index()).peak_reserved) / (1 << 20));
  }
#endif
  f.real_tokens = t.real_tokens;
  f.executed_flops = t.executed_flops;
  f.ds_loss = t.ds_loss, f.ds_tokens = t.ds_tokens, f.ds_correct = t.ds_correct;
  metrics_->on_step(std::move(f));
}

void Loop::validate() {
  if (!valid_) return;
  Watchdog::LongPhase phase(watchdog_, "validation", 0);  // its length scales with the valid set
  EvalOptions o;
  o.max_micro_batches = c_.data.valid_micro_num;
  o.show_progress = lead_;
  // A signal or a quitting stop file ends validation within one batch (every rank at the same one).
  o.stop = [this] {
    return (signal_ && signal_->requested()) || (lead_ && stop_decision(stop_file_.poll(), state_.step).quit);
  };
  Timer took;
  took.start();
  const Evaluation ev = evaluate(model_, *valid_, device_, &comm_, o);
  took.stop();
  if (ev.interrupted) {
    log::job_warn("validation at step ", state_.step, " interrupted by a stop request: no val/ figures this time");
    stop_agreed_ = true;  // the run stops after this step (saving it first)
    return;
  }
  if (!lead_) return;
  MetricFields f = {{"step", static_cast<double>(state_.step)}};
  for (const EvalResult& e : ev.results) {
    f.emplace_back("val/" + e.name + "_loss", e.loss);
    f.emplace_back("val/" + e.name + "_acc", e.acc);
    f.emplace_back("val/" + e.name + "_plex", e.perplexity);
  }
  metrics_->on_validation(f, took.seconds());  // the ETA counts the validations left at this one's pace
}

void Loop::save() {
  Watchdog::LongPhase phase(watchdog_, "checkpoint", std::max(600.0, 10 * c_.monitor.hang_timeout));
  summary_.last_checkpoint = saver_->save(state_.step);
  saved_step_ = state_.step;
}

Batch Loop::to_device(const Batch& host) {
#ifdef LOOM_CUDA_KERNELS
  if (transfer_) {  // from pinned memory on a side stream; the compute stream waits on the device
    transfer_->start(host);
    return transfer_->finish();
  }
#endif
  return host.to(device_);
}

void Loop::profile_memory() {
#ifdef LOOM_CUDA_KERNELS
  if (device_.is_cuda()) {
    const cuda::MemoryBreakdown b = memory_breakdown(model_, *update_, cuda_index());
    sys::AtomicFile out(c_.job.run_dir + "/memory_profile.json");
    out.write(cuda::to_json(b) + "\n");
    out.commit();
    log::info("memory at step ", state_.step, ": ", cuda::describe(b), " (", out.path(), ")");
    return;
  }
#endif
  log::warn("--profile-memory: the breakdown needs a CUDA device (job.device=", c_.job.device, ")");
}

void Loop::report_out_of_memory(const c10::OutOfMemoryError& e) {
  // The allocator's message holds the requested size and the device's free memory; add where the
  // memory went, then let main() exit (code 1: the environment, docs/TRAIN.md's exit codes).
  std::string what = e.what_without_backtrace();
  what = what.substr(0, what.find('\n'));
  log::error("out of memory at step ", state_.step, ": ", what);
#ifdef LOOM_CUDA_KERNELS
  if (device_.is_cuda()) {
    log::error("memory: ", cuda::describe(memory_breakdown(model_, *update_, cuda_index())),
               ". Hints: model.checkpoint=1 recomputes activations; a smaller data.micro_bsz with a larger "
               "data.micro_num keeps the global batch");
  }
#endif
}


bool Loop::should_stop(const StopSignal& signal) {
  faults_.pause(state_.step, signal);
  const bool by_fault = faults_.stop_requested(state_.step);
  if (!stop_agreed_ && !quit_by_file_ && !by_fault) return false;
  log::job_warn(quit_by_file_        ? std::string("ckpt.stop_file")
            : signal.requested() ? "signal " + std::to_string(signal.signal_number())
            : stop_agreed_       ? std::string("another rank's stop request")
                                 : std::string("debug.stop_at_step"),
            " received: saving at step ", state_.step, " and stopping");
  summary_.stopped_by_signal = true;
  return true;
}

StepRecord Loop::begin_step(Profiler& profiler) {
  comm_.set_step(state_.step);
  alerts_.set_step(state_.step);
  profiler.on_step_begin(state_.step - first_step_);
  data_t_.reset(), fwd_t_.reset(), opt_t_.reset(), step_t_.reset();
#ifdef LOOM_CUDA_KERNELS
  if (device_.is_cuda()) cuda::reset_peak_memory(cuda_index());  // peak_memory_mb: this step's
#endif
  step_t_.start();
  if (state_.step == first_step_) first_tokens_ = state_.consumed_tokens;
  StepRecord s;
  s.index = state_.step;
  return s;
}

void Loop::next_batches(StepRecord& s) {
  set_phase("data");
  data_t_.start();
  ProfileRange range("data");
  for (int64_t m = 0; m < c_.data.micro_num; ++m) {
    const Batch host = loader_.next();
    // On the host copy: no device read-back.
    s.sums.real_tokens += host.segments.ge(0).sum().item<int64_t>();
    s.sums.executed_flops += executed_flops(model_->options(), host.tokens.numel(), host.cu_seqlens);
    s.micro.push_back(to_device(host));
  }
  range.end();
  data_t_.stop();
  s.skip_batch = loader_.should_skip(s.index);
  s.lr = schedule_.lr(update_->updates());
}

void Loop::forward_backward(StepRecord& s) {
  if (s.skip_batch) {  // InternLM's BatchSkipper
    ++state_.skipped_batches;
    log::job_warn("step ", s.index, ": skipped by data.skip_batches (data consumed, no update)");
    return;
  }
  set_phase("forward_backward");
  faults_.in_forward(s.index);
  fwd_t_.start();
  ProfileRange range("forward_backward");
  const int64_t real_tokens = s.sums.real_tokens;
  const double executed = s.sums.executed_flops;
  try {
    s.sums = accumulate_gradients(s.micro);
  } catch (const c10::OutOfMemoryError& e) {
    report_out_of_memory(e);
    throw;
  }
  s.sums.real_tokens = real_tokens;
  s.sums.executed_flops = executed;
  range.end();
  fwd_t_.stop();
  faults_.after_backward(s.index, model_->parameters());
}

void Loop::check_spike(StepRecord& s) {
  if (s.skip_batch || !spike_.enabled()) return;
  read_totals(s);  // the one wait of a step for its figures: a spike must cancel the update
  const double loss = faults_.observed_loss(s.index, s.totals.loss_sum / std::max(s.totals.loss_tokens, 1.0));
  const SpikeVerdict v = spike_.observe(s.index, loss);
  if (!v.is_spike) return;
  s.spike_skip = c_.monitor.spike.exclude_spikes;
  if (s.spike_skip) ++state_.spike_skips;
  const std::string what = "step " + std::to_string(s.index) + " (0-based; data.skip_batches index): loss " +
                           format_number(loss) + " is " + format_number(v.ratio, 3) + "x the median " +
                           format_number(v.reference) + " of the last " + std::to_string(c_.monitor.spike.window) +
                           " losses" + (s.spike_skip ? "; update skipped" : "");
  log::job_warn("loss spike: ", what);
  alert(AlertLevel::kWarn, "loss spike", what);
}

void Loop::optimizer_step(StepRecord& s) {
  if (s.skip_batch) return;
  set_phase("optimizer");
  opt_t_.start();
  ProfileRange range("optimizer");
  if (s.spike_skip) {
    s.result.skipped = true;  // grad_norm stays 0: not computed
  } else {
    s.result = update_->step(s.lr);
    if (s.result.skipped) {
      ++state_.inf_nan_skips;
      const std::string what = "step " + std::to_string(s.index) + ": gradient norm is " +
                               format_number(s.result.grad_norm) + ", update skipped (" +
                               std::to_string(state_.inf_nan_skips) + " so far); the LR schedule does not advance";
      log::job_warn(what);
      alert(AlertLevel::kWarn, "update skipped (inf/NaN gradients)", what);
    }
  }
  // The second step's breakdown, while its gradients still exist (on CUDA zero_grad releases them).
  if (c_.flags.profile_memory && s.index == first_step_ + 1) profile_memory();
  update_->zero_grad();
  range.end();
  opt_t_.stop();
}

void Loop::end_step(StepRecord& s) {
  read_totals(s);  // computed before the update: by now the device has long passed the copy
  stop_agreed_ = s.totals.stop;
  quit_by_file_ = s.totals.file.quit;
  ++state_.step;
  state_.updates = update_->updates();
  state_.sampler = loader_.state();
  state_.consumed_tokens += static_cast<uint64_t>(s.totals.real_tokens);
  // The host waits for the device's stream only on a step whose device time a figure needs (a
  // logged step, the health report's); elsewhere it goes on to the next step's data while the
  // device finishes this one. An update overlapped with the next forward (adam.overlap_update)
  // runs on a side stream and is not waited for here: the next step's forward waits for each of
  // its layers, so that step's time holds whatever of the update the overlap did not hide.
  if (device_.is_cuda() && times_step()) {
#ifdef LOOM_CUDA_KERNELS
    c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(cuda_index())).synchronize();
#else
    torch::cuda::synchronize(cuda_index());  // no overlapped update in this build
#endif
  }
  step_t_.stop();
  if (watchdog_) watchdog_->heartbeat(state_.step);
  if (progress_) progress_->set(static_cast<uint64_t>(state_.step));
  set_phase("between steps");
}

void Loop::after_step(const StepRecord& s) {
  if (!s.skip_batch) {
    ProfileRange range("log");
    count_step();
    if (logs_step()) {
      log_step(s);
      unlogged_.reset();
    } else {  // kept for finish(): a validation interrupted by a stop request ends the run here
      unlogged_.emplace();
      unlogged_->index = s.index, unlogged_->lr = s.lr, unlogged_->totals = s.totals, unlogged_->result = s.result;
    }
  }
  ++summary_.steps_done;
  if (c_.monitor.diag_every > 0 && state_.step % c_.monitor.diag_every == 0) {
    const RankTimeStats st = step_time_report(&comm_, step_t_.seconds(), c_.monitor.diag_outlier_ratio);
    if (st.outliers.empty()) log::info("health: ", describe(st, "step time", c_.monitor.diag_outlier_ratio));
    else log::warn("health: ", describe(st, "step time", c_.monitor.diag_outlier_ratio));
    if (!st.outliers.empty()) alert(AlertLevel::kWarn, "slow ranks", describe(st, "step time", c_.monitor.diag_outlier_ratio));
  }
  if (c_.data.valid_every > 0 && state_.step % c_.data.valid_every == 0 && state_.step != c_.data.total_steps)
    validate();
  const StopDecision& by_file = s.totals.file;
  const bool periodic = c_.ckpt.checkpoint_every > 0 && state_.step % c_.ckpt.checkpoint_every == 0;
  if (saver_ && (periodic || (by_file.save && !by_file.quit))) save();
}


void Loop::finish() {
  if (unlogged_ && unlogged_->index + 1 == state_.step) log_step(*unlogged_);  // the run's last step
  unlogged_.reset();
  if (progress_) progress_->finish();
  // The last checkpoint before the last validation: a kill during a long validation loses nothing.
  if (saver_ && saved_step_ != state_.step) save();
  if (state_.step == c_.data.total_steps && !summary_.stopped_by_signal) validate();
  if (saver_) saver_->finish();  // the process must not end mid-write
  summary_.final_step = state_.step;
  // This process's steps and tokens apart from the whole run's (a resumed run has both).
  const uint64_t run_tokens = summary_.steps_done > 0 ? state_.consumed_tokens - first_tokens_ : 0;
  const std::string done = "step " + format_count(state_.step) + "/" + format_count(c_.data.total_steps) +
                           "; this run: " + format_count(summary_.steps_done) + " steps, " + format_count(run_tokens) +
                           " tokens; whole run: " + format_count(state_.consumed_tokens) + " tokens, " +
                           format_count(state_.inf_nan_skips) + " inf/nan skips, " +
                           format_count(state_.spike_skips) + " spike skips" +
                           (summary_.steps_done > 0 ? "; last loss " + format_number(summary_.last_loss) : "");
  log::info("done: ", done);
  alert(AlertLevel::kInfo, summary_.stopped_by_signal ? "training stopped" : "training finished", done);
}


}  // namespace loom
