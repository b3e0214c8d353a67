#include "trainer.h"

#include <malloc.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "alerts.h"
#include "async_checkpoint.h"
#include "chunked_loss.h"
#include "communicator.h"
#include "data_parallel.h"
#include "attention_select.h"
#include "evaluator.h"
#include "fault_injector.h"
#include "flops.h"
#include "fp8_linear.h"
#include "health_check.h"
#include "launch.h"
#include "loader.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "loom/hash.h"
#include "loom/sys.h"
#include "loss.h"
#include "metrics.h"
#include "model_state.h"
#include "plan_command.h"
#include "memory_usage.h"
#include "profiling.h"
#include "run_dir.h"
#include "run_state.h"
#include "spike_detector.h"
#include "stop_file.h"
#include "stop_signal.h"
#include "timer.h"
#include "train_state.h"
#include "watchdog.h"

#ifdef LOOM_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "cuda_batch_transfer.h"
#include "cuda_memory.h"
#endif

namespace loom {

namespace {

// Sums of one step's micro-batches on this rank.
struct StepSums {
  torch::Tensor loss_sum, correct;  // detached scalars
  torch::Tensor ds_loss, ds_tokens, ds_correct;
  int64_t loss_tokens = 0;   // tokens with a label (all ranks: the loss divisor)
  int64_t real_tokens = 0;   // tokens inside segments (not padding), this rank
};

// A step's sums over every rank, on the host, plus the ranks' agreement to stop.
struct StepTotals {
  double loss_sum = 0, correct = 0, real_tokens = 0;
  double loss_tokens = 0;  // already global in StepSums
  std::vector<double> ds_loss, ds_tokens, ds_correct;
  bool stop = false;
};

// What one step carries from one stage of Loop::run to the next.
struct StepRecord {
  int64_t index = 0;        // 0-based index of this step (data.skip_batches counts these)
  bool skip_batch = false;  // data.skip_batches: the data is consumed, nothing computed or updated
  double lr = 0;
  std::vector<Batch> micro;
  StepSums sums;
  StepTotals totals;
  bool spike_skip = false;  // a loss spike cancels the update (monitor.skip_spike_batches)
  OptimizerStepResult result;
};

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

// Seconds since this process was launched (its start time in /proc); -1 if unknown.
double seconds_since_launch() {
  std::ifstream stat("/proc/self/stat"), up("/proc/uptime");
  std::string line;
  double uptime = 0;
  if (!std::getline(stat, line) || !(up >> uptime)) return -1;
  const size_t paren = line.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(line.substr(paren + 2));
  std::string f;
  for (int i = 3; i < 22 && fields >> f; ++i) {
  }
  unsigned long long start_ticks = 0;
  if (!(fields >> start_ticks)) return -1;
  return uptime - static_cast<double>(start_ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The start-up's phases, one log line each as it ends (seconds, host RSS).
class StartupClock {
 public:
  void phase(const char* what) {
    const auto now = std::chrono::steady_clock::now();
    log::info("start-up: ", what, " ", round2(std::chrono::duration<double>(now - last_).count()), " s, host RSS ",
              round2(static_cast<double>(current_rss_bytes()) / (1 << 30)), " GiB");
    last_ = now;
  }
  // After the first step: its phase, then launch -> first step and the host's peak RSS so far.
  void first_step_done() {
    phase("first step");
    const double since_launch = seconds_since_launch();
    log::info("start-up: launch -> first step ", since_launch >= 0 ? str(round2(since_launch), " s") : "unknown",
              ", host peak RSS ", round2(static_cast<double>(peak_rss_bytes()) / (1 << 30)), " GiB");
  }

 private:
  static double round2(double x) { return std::round(x * 100) / 100; }
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

class Loop {
 public:
  Loop(const TrainConfig& c, const WeightInit& init_weights, Communicator& comm, Alerts& alerts, Watchdog* watchdog)
      : c_(c),
        init_weights_(init_weights),
        comm_(comm),
        alerts_(alerts),
        watchdog_(watchdog),
        device_(c.job.device),
        data_(c.data),
        loader_(data_, c.data, comm.rank(), comm.world()),
        schedule_(c.lr_schedule_options()),
        ckpt_(c.ckpt),
        spike_(c.monitor.spike),
        stop_file_(c.ckpt.stop_file, comm.rank() == 0),
        faults_(c.debug) {}

  TrainSummary run();

 private:
  void start();
  // One step, in the order run() calls them.
  bool should_stop(const StopSignal& signal);
  StepRecord begin_step(Profiler& profiler);
  void next_batches(StepRecord& s);
  void forward_backward(StepRecord& s);
  void reduce(StepRecord& s, bool stop_here);
  void check_spike(StepRecord& s);
  void optimizer_step(StepRecord& s);
  void end_step(const StepRecord& s);
  void after_step(const StepRecord& s);  // metrics, health report, validation, checkpoint, stop file
  void finish();                          // the last validation and checkpoint, the summary

  StepSums accumulate_gradients(std::vector<Batch>& micro);
  void log_step(const StepRecord& s);
  void validate();
  std::string save();
  std::string save_sharded_async(const std::string& key, const std::string& tmp);
  // The save's one "training blocked" line: from t0 (save() began) to now.
  void log_blocked(std::chrono::steady_clock::time_point t0, const std::string& dir);
  // What an asynchronous save copies, as shapes: its host buffers are made from it at start-up.
  CheckpointContents save_layout();
  void publish_shard(const std::string& key, const CheckpointFile& f);      // ranks > 0: tell rank 0
  void collect_shards(const std::string& key, std::vector<CheckpointFile>& shards);  // rank 0
  void probe();
  void warn_if_global_batch_changed(const std::string& resume_dir);
  CheckpointContents contents();  // what rank 0 writes (everything but the ZeRO-1 shards), from checkpointed_
  void set_phase(const char* phase) {
    if (watchdog_) watchdog_->set_phase(phase);
  }
  // Alerts that speak for the job come from rank 0 only (each rank alerts its own exceptions).
  void alert(AlertLevel level, const std::string& title, const std::string& body) {
    if (lead_) alerts_.send(level, title, body);
  }
  Batch to_device(const Batch& host);
  void profile_memory();
  void report_out_of_memory(const c10::OutOfMemoryError& e);
  int cuda_index() const { return device_.has_index() ? device_.index() : 0; }

  const TrainConfig& c_;
  const WeightInit& init_weights_;
  Communicator& comm_;
  Alerts& alerts_;
  Watchdog* watchdog_;  // null: monitor.hang_timeout = 0
  bool lead_ = comm_.rank() == 0;  // writes the logs, TensorBoard and the shared checkpoint files
  torch::Device device_;
  StartupClock startup_;  // before data_: its first phase is the data index
  TrainData data_;
  Loader loader_;
  std::unique_ptr<ValidationSets> valid_;
  InternLM model_{nullptr};
  std::unique_ptr<DataParallelUpdate> update_;
  std::unique_ptr<FaultLayerHooks> fault_hooks_;  // debug.kill_at_layer
  std::vector<std::unique_ptr<Stateful>> checkpointed_;  // what a checkpoint holds, in load order
  LrSchedule schedule_;
  Checkpointer ckpt_;
  std::unique_ptr<AsyncCheckpointer> async_;  // ckpt.async_save: rank 0 (replicated), every rank (sharded)
  SpikeDetector spike_;
  StopFile stop_file_;
  FaultInjector faults_;
  std::unique_ptr<MetricsFanout> metrics_;  // rank 0: metrics.jsonl, the log line, TensorBoard
  TrainState state_;
  Timer data_t_, step_t_;
  // Device time on a CUDA device (CUDA events): fwd_bwd_time + optimizer_time fit inside step_time.
  DeviceTimer fwd_t_{device_.is_cuda() ? cuda_index() : -1}, opt_t_{device_.is_cuda() ? cuda_index() : -1};
  std::unique_ptr<Progress> progress_;  // rank 0: step N/total, rate, ETA
  MetricFields unlogged_;               // rank 0: the last step's record when job.log_every passed it over
  double flops_per_token_ = 0;
  int64_t first_step_ = 0;      // state_.step when this process started
  bool stop_agreed_ = false;    // a signal reached some rank: every rank stops after the same step
  bool quit_by_file_ = false;   // ckpt.stop_file's +N
  int64_t saved_step_ = -1;
  int64_t saves_ = 0;  // names this process's saves in the store
  bool gather_into_async_buffers_ = false;  // an async save's contents(): ZeRO-3 gathers into async_'s buffers
  std::string tokenizer_model_;  // data.tokenizer's bytes, copied into every checkpoint
  TrainSummary summary_;
#ifdef LOOM_CUDA_KERNELS
  std::unique_ptr<cuda::BatchTransfer> transfer_;
#endif
};

namespace {

// CPU training frees and allocates the same activation sizes every step. With glibc's defaults a
// freed block above the mmap threshold goes back to the kernel and the next step faults its pages
// in again (~0.5M minor faults in 12 steps of bench/train_bench.sh, ~10% of the step). Keeping
// freed memory in the heap costs nothing: the next step needs the same peak. Skipped when the user
// tunes glibc through its own MALLOC_*_ variables.
void keep_freed_memory_in_heap() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return;
  // mallopt returns 0 for a value it refuses: only speed is at stake, so say so and go on.
  const bool ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) != 0 &&         // glibc's maximum; larger blocks still use mmap
                  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) != 0 &&  // never shrink between steps
                  mallopt(M_TOP_PAD, 256 << 20) != 0;                 // grow the heap in large steps
  if (!ok) log::warn("mallopt refused a setting: freed activations may go back to the kernel every step");
}

}  // namespace

void Loop::start() {
  if (c_.job.threads > 0) torch::set_num_threads(static_cast<int>(c_.job.threads));
  if (device_.is_cpu()) keep_freed_memory_in_heap();
  LOOM_CHECK(static_cast<int64_t>(data_.vocab_size()) <= c_.model.vocab_size, "model.vocab_size ",
             c_.model.vocab_size, " is smaller than the data's vocabulary ", data_.vocab_size());
  data_.log_summary(loader_.layout().global_batch(), c_.data.total_steps);
  if (!c_.data.tokenizer.empty()) {
    // The model the data was tokenized with goes into every checkpoint: checked here, not trusted.
    tokenizer_model_ = sys::read_file(c_.data.tokenizer);
    const uint64_t have = xxh64(tokenizer_model_.data(), tokenizer_model_.size());
    const uint64_t want = data_.tokenizer().model_fingerprint;
    LOOM_CHECK(want == 0 || have == want, "data.tokenizer ", c_.data.tokenizer, " (XXH64 ", hex64(have),
               ") is not the model the data in ", c_.data.train_folder, " was tokenized with (XXH64 ", hex64(want), ")");
    if (want == 0)
      log::job_warn("data.tokenizer ", c_.data.tokenizer, ": the data records no tokenizer fingerprint to check it against");
  }
  if (!c_.data.valid_folder.empty())
    valid_ = std::make_unique<ValidationSets>(c_.data, comm_.rank(), comm_.world(), &data_);
  startup_.phase("data index");

  // The memory plan, before any model tensor exists: resolves model.checkpoint=auto and refuses a
  // run that cannot fit.
  const MemoryPlan plan = plan_for_run(c_, comm_.world(), device_);
  log::info(plan.to_text());
  if (c_.model.checkpoint_auto)
    log::info("model.checkpoint=auto: ", plan.checkpointed_layers, " of ", c_.model.num_layers, " layers recomputed (",
              plan.in.model.checkpoint, ")");
  LOOM_CHECK(plan.fits || plan.in.device_bytes == 0, plan.refusal(device_.str()));

  if (c_.model.fp8) {
    std::string why;
    LOOM_CHECK(fp8_supported(device_, &why), "model.precision=fp8: ", why, " (model.precision=bf16 runs here)");
  }
  torch::manual_seed(c_.job.seed);
  // CUDA: allocated and initialised on the device from the seed (init.h), no host copy of the
  // weights. CPU: from torch's default generator, the weights CPU runs always had (docs/TRAIN.md).
  model_ = device_.is_cpu() ? InternLM(plan.in.model) : InternLM(plan.in.model, ModelInit{device_, c_.job.seed});
  model_->train();
  if (device_.is_cuda()) {
    // TF32 for the matmuls that stay fp32 (an fp32 run, fp32 pieces of a bf16 one).
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
#ifdef LOOM_CUDA_KERNELS
    transfer_ = std::make_unique<cuda::BatchTransfer>(cuda_index());
#endif
  }
  select_attention(device_, c_.model.dtype, c_.model.head_dim(), parse_attention_kernel(c_.job.attention),
                   AttentionShape{c_.model.num_attention_heads, c_.model.kv_heads(), c_.data.seq_len,
                                  plan.checkpointed_layers > 0});
  startup_.phase("model plan, build and init");
  update_ = std::make_unique<DataParallelUpdate>(comm_, named_state(*model_), c_.optimizer_options(), c_.parallel);
  if (c_.model.fp8) update_->publish_fp8_weight_amax();
  startup_.phase("optimizer");
  flops_per_token_ = model_flops_per_token(c_.model, c_.data.seq_len);
  log::info("model: ", format_count(static_cast<int64_t>(model_->num_parameters())), " parameters, ", update_->num_decay(),
            " tensors with weight decay, ", update_->num_no_decay(), " without; ", format_number(flops_per_token_ / 1e9, 3),
            " GFLOP per token");
  log::info("update: ", update_->describe());
  checkpointed_.push_back(std::make_unique<RunState>(state_, loader_, spike_, *update_, comm_.world()));
  LayerHooks* hooks = update_->layer_hooks();
  if (faults_.kills_in_layers()) {
    fault_hooks_ = std::make_unique<FaultLayerHooks>(faults_, state_.step, hooks);
    hooks = fault_hooks_.get();
  }
  model_->set_layer_hooks(hooks);
  checkpointed_.push_back(std::make_unique<ModuleState>(*model_, [this] {
    if (!gather_into_async_buffers_ || !lead_) return update_->whole_model_state(named_state(*model_));
    return update_->whole_model_state(named_state(*model_), [this](const std::string& name, const torch::Tensor& like) {
      return async_->model_buffer(name, like);
    });
  }));
  checkpointed_.push_back(std::make_unique<OptimizerState>(*update_));  // after the model: master weights

  std::string resume_dir;
  const std::string& resume = c_.flags.resume;
  if (resume == "auto" || resume == "auto-or-fresh") {
    const Checkpointer::Choice pick = ckpt_.choose_resume(check_state_step);
    resume_dir = pick.dir;
    if (resume_dir.empty() && !pick.rejected.empty()) {
      std::string why;
      for (const std::string& r : pick.rejected) why += "\n  " + r;
      // Starting fresh would overwrite them step by step: only on request.
      LOOM_CHECK(resume == "auto-or-fresh", "--resume auto: no checkpoint in ", c_.ckpt.folder, " validates:", why,
                 "\nRepair or move them, or pass --resume auto-or-fresh to start fresh over them");
      log::warn("--resume auto-or-fresh: no checkpoint in ", c_.ckpt.folder, " validates, starting fresh:", why);
    } else if (resume_dir.empty()) {
      log::info("--resume ", resume, ": no checkpoint in ", c_.ckpt.folder, ", starting fresh");
    }
  } else if (!resume.empty()) {
    resume_dir = resume;
    check_state_step(resume_dir, validate_checkpoint_named(resume_dir));
  }
  if (!resume_dir.empty()) {
    // Equal shapes load under another architecture (more heads, another rotary base): refuse what
    // would silently train on as a different model; --init-from takes weights only.
    const std::vector<std::string> diff = model_key_differences(sys::read_file(resume_dir + "/config.ini"), c_.resolved_ini);
    std::string list;
    for (const std::string& d : diff) list += "\n  " + d;
    LOOM_CHECK(diff.empty(), resume_dir, ": the checkpoint's model differs from this run's:", list,
               "\nResume with its model.* values, or start from its weights only with --init-from ", resume_dir,
               " (a fresh run)");
  }
  int64_t keep_logs_through = -1;
  if (!resume_dir.empty()) {
    for (const auto& part : checkpointed_) part->load_state(resume_dir);
    LOOM_CHECK(update_->updates() == state_.updates, resume_dir, ": optimizer step ", update_->updates(),
               " disagrees with state.json updates ", state_.updates);
    keep_logs_through = state_.step;
    saved_step_ = state_.step;
    log::info("resumed from ", resume_dir, ": step ", state_.step, ", ", state_.updates, " updates, ",
              state_.sampler.consumed_samples, " samples consumed",
              comm_.world() > 1 || state_.world_size > 1 ? str(" (saved at world size ", state_.world_size, ")") : "");
    warn_if_global_batch_changed(resume_dir);
  } else if (!c_.flags.init_from.empty()) {
    validate_checkpoint(c_.flags.init_from);
    ModuleState(*model_).load_state(c_.flags.init_from);
    log::info("initialised the weights from ", c_.flags.init_from);
  } else if (init_weights_) {
    init_weights_(*model_);
  }
  // The same start on every rank whatever happened above (seeds, a file read by one rank only...).
  update_->broadcast_parameters();
  if (update_->sharded()) {  // what stage 3 saves, measured on every rank
    const double bytes = static_cast<double>(update_->resident_parameter_bytes());
    const auto lo = static_cast<int64_t>(comm_.all_reduce_scalar(bytes, ReduceOp::kMin));
    const auto hi = static_cast<int64_t>(comm_.all_reduce_scalar(bytes, ReduceOp::kMax));
    log::info("parameter bytes resident per rank: min ", lo, " max ", hi);
  }
  startup_.phase("weights (resume, init-from, broadcast)");
  state_.sampler = loader_.state();
  // Replicated: rank 0 writes everything. Sharded: every rank writes its shard, rank 0 the rest.
  if (c_.ckpt.async_save && c_.ckpt.enable_save && (lead_ || update_->sharded())) {
    async_ = std::make_unique<AsyncCheckpointer>(ckpt_, [this](int64_t step, const std::string& error) {
      alerts_.send(AlertLevel::kError, "checkpoint write failed", str("step ", step, ": ", error));
    });
    // The host buffers of every save, made now on a background thread while training starts:
    // the first save then copies instead of allocating (and page-locking) them.
    async_->reserve(save_layout(), device_.is_cuda() ? cuda_index() : -1);
  }
  if (!lead_) return;
  metrics_ = std::make_unique<MetricsFanout>();
  metrics_->add(std::make_unique<JsonlSink>(c_.job.run_dir + "/metrics.jsonl", keep_logs_through));
  metrics_->add(std::make_unique<LogLineSink>(c_.data.total_steps));
  if (c_.job.tensorboard)
    metrics_->add(std::make_unique<TensorBoardSink>(c_.job.run_dir + "/tensorboard", keep_logs_through));
}

StepSums Loop::accumulate_gradients(std::vector<Batch>& micro) {
  StepSums s;
  for (const Batch& b : micro) s.loss_tokens += b.num_loss_tokens;  // counted on the host
  // Every token of the global batch weighs the same: divide each micro-batch's sum by the total
  // over all ranks (gradients are then summed over ranks, data_parallel.h).
  if (comm_.distributed()) s.loss_tokens = static_cast<int64_t>(comm_.all_reduce_scalar(static_cast<double>(s.loss_tokens)));
  const double denom = static_cast<double>(std::max<int64_t>(s.loss_tokens, 1));
  const int64_t num_datasets = static_cast<int64_t>(data_.datasets().size());
  for (size_t m = 0; m < micro.size(); ++m) {
    Batch& b = micro[m];
    update_->before_backward(m + 1 == micro.size());
    // On CUDA the head and the loss run chunk by chunk (chunked_loss.h): no [B, T, V] fp32 logits.
    LossResult r = device_.is_cuda() ? compute_chunked_loss(model_->hidden_states(b), model_->head_weight(), b,
                                                            c_.loss.label_smoothing, num_datasets)
                                     : compute_loss(model_->forward(b), b, c_.loss.label_smoothing, num_datasets);
    (r.loss_sum / denom).backward();
    auto acc = [](torch::Tensor& into, const torch::Tensor& t) { into = into.defined() ? into + t : t.detach(); };
    acc(s.loss_sum, r.loss_sum.detach());
    acc(s.correct, r.correct);
    acc(s.ds_loss, r.dataset_loss_sum);
    acc(s.ds_tokens, r.dataset_tokens);
    acc(s.ds_correct, r.dataset_correct);
  }
  return s;
}

void Loop::reduce(StepRecord& step, bool stop_here) {
  set_phase("reduce");
  const StepSums& s = step.sums;
  // One small vector, one collective: [loss, correct, real tokens, stop, per-dataset loss/tokens/correct].
  const int64_t nd = static_cast<int64_t>(data_.datasets().size());
  const bool computed = s.loss_sum.defined() && s.ds_loss.defined();
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  // The device's figures in one read-back (one wait for the device, not one per figure).
  torch::Tensor measured = torch::zeros({2 + 3 * nd}, f64);
  if (computed) {
    std::vector<torch::Tensor> parts{s.loss_sum.reshape(1), s.correct.reshape(1), s.ds_loss.reshape(nd),
                                     s.ds_tokens.reshape(nd), s.ds_correct.reshape(nd)};
    for (auto& p : parts) p = p.to(torch::kFloat64);
    measured = torch::cat(parts).to(torch::kCPU);
  }
  const torch::Tensor host = torch::tensor({static_cast<double>(s.real_tokens), stop_here ? 1.0 : 0.0}, f64);
  torch::Tensor all = torch::cat({measured.narrow(0, 0, 2), host, measured.narrow(0, 2, 3 * nd)});
  if (comm_.distributed()) {
    torch::Tensor on_comm = all.to(comm_.device());
    comm_.all_reduce(on_comm);
    all = on_comm.cpu();
  }
  const double* v = all.data_ptr<double>();
  StepTotals& t = step.totals;
  t.loss_sum = v[0], t.correct = v[1], t.real_tokens = v[2], t.stop = v[3] > 0;
  t.loss_tokens = static_cast<double>(s.loss_tokens);
  t.ds_loss.assign(v + 4, v + 4 + nd);
  t.ds_tokens.assign(v + 4 + nd, v + 4 + 2 * nd);
  t.ds_correct.assign(v + 4 + 2 * nd, v + 4 + 3 * nd);
  stop_agreed_ = t.stop;
}

void Loop::log_step(const StepRecord& s) {
  const StepTotals& t = s.totals;
  const OptimizerStepResult& r = s.result;
  const double tokens = std::max(t.loss_tokens, 1.0);
  const double loss = t.loss_sum / tokens;
  summary_.last_loss = loss;
  if (!lead_) return;
  const double step_s = step_t_.seconds();
  const double world = static_cast<double>(comm_.world());
  // Model FLOPs of the packs one device processed (padding included: it is computed).
  const double processed = static_cast<double>(loader_.layout().global_batch() * c_.data.seq_len) / world;
  const double tflops = flops_per_token_ * processed / step_s / 1e12;
  MetricFields f = {
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
      {"tokens_per_s", t.real_tokens / step_s},     // all ranks
      {"tgs", t.real_tokens / step_s / world},      // per device (one device per rank)
      {"tflops", tflops},                           // per device
      {"mfu", tflops / c_.job.peak_tflops},
      {"step_time", step_s},
      {"data_time", data_t_.seconds()},
      {"fwd_bwd_time", fwd_t_.seconds()},
      {"optimizer_time", opt_t_.seconds()},
      {"peak_memory_mb", static_cast<double>(peak_memory_bytes(device_)) / (1 << 20)},
      {"micro_num", static_cast<double>(c_.data.micro_num)},
  };
#ifdef LOOM_CUDA_KERNELS
  if (device_.is_cuda()) {
    f.emplace_back("peak_reserved_mb", static_cast<double>(cuda::memory_stats(cuda_index()).peak_reserved) / (1 << 20));
  }
#endif
  const auto names = data_.dataset_names();
  for (size_t d = 0; d < names.size(); ++d) {
    if (t.ds_tokens[d] == 0) continue;
    const double dl = t.ds_loss[d] / t.ds_tokens[d];
    f.emplace_back("loss/" + names[d], dl);
    f.emplace_back("acc/" + names[d], t.ds_correct[d] / t.ds_tokens[d]);
    f.emplace_back("plex/" + names[d], std::exp(dl));
  }
  // Every job.log_every steps, and always the run's last step (total_steps, a stop file, a signal):
  // finish() writes a record left here.
  if (state_.step % c_.job.log_every == 0 || state_.step == c_.data.total_steps) {
    metrics_->write(f);
    unlogged_.clear();
  } else {
    unlogged_ = std::move(f);
  }
}

void Loop::validate() {
  if (!valid_) return;
  Watchdog::LongPhase phase(watchdog_, "validation", 0);  // its length scales with the valid set
  MetricFields f = {{"step", static_cast<double>(state_.step)}};
  const std::vector<EvalResult> results = evaluate(model_, *valid_, device_, &comm_, /*show_progress=*/lead_);
  if (!lead_) return;
  for (const EvalResult& e : results) {
    f.emplace_back("val/" + e.name + "_loss", e.loss);
    f.emplace_back("val/" + e.name + "_acc", e.acc);
    f.emplace_back("val/" + e.name + "_plex", e.perplexity);
  }
  metrics_->write(f);
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
  // memory went, then let main() exit (code 3).
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

std::string Loop::save() {
  Watchdog::LongPhase phase(watchdog_, "checkpoint", std::max(600.0, 10 * c_.monitor.hang_timeout));
  const auto t0 = std::chrono::steady_clock::now();
  if (async_) {
    // The previous write must be done (a sharded one published by rank 0) before this save
    // reuses the host buffers or begins a new step_N.tmp.
    const AsyncSaveResult previous = async_->wait();  // a failed one was logged and alerted by the writer
    if (previous.ok()) log::info("checkpoint ", previous.path, " written (step ", previous.step, ")");
  }
  if (c_.ckpt.async_save && !update_->sharded()) {
    // Rank 0 copies the state to host memory and a background thread writes it; the others go on.
    saved_step_ = state_.step;
    const std::string dir = ckpt_.options().folder + "/" + checkpoint_dir_name(state_.step);
    if (!async_) return dir;
    async_->save(state_.step, contents());
    log_blocked(t0, dir);
    return dir;
  }
  // Every rank takes part: shard ranks write their optimizer shard into step_N.tmp/, rank 0 the
  // rest, then publishes the folder (the checkpoint folder is shared by all ranks, docs/DISTRIBUTED.md).
  const std::string key = "ckpt/" + std::to_string(saves_++) + "/";
  std::string tmp;
  if (lead_) tmp = ckpt_.begin(state_.step);
  if (comm_.distributed()) {
    if (lead_) comm_.store_set(key + "tmp", tmp);
    tmp = comm_.store_get(key + "tmp");
  }
  if (async_) {
    const std::string dir = save_sharded_async(key, tmp);
    log_blocked(t0, dir);
    return dir;
  }
  std::vector<CheckpointFile> shards;
  if (const auto mine = update_->save_shard(tmp)) {
    shards.push_back(*mine);
    publish_shard(key, *mine);
  }
  // Every rank: at ZeRO stage 3 the whole weights are gathered collectively.
  CheckpointContents cc = contents();
  std::string dir;
  if (lead_) {
    faults_.in_save(state_.step, tmp, cc.model);
    collect_shards(key, shards);
    dir = ckpt_.commit(state_.step, cc, shards);
    log::info("checkpoint ", dir, " written (step ", state_.step, ")");
  }
  comm_.barrier();  // nobody runs ahead into a step (or a next save) before the checkpoint is published
  saved_step_ = state_.step;
  return lead_ ? dir : ckpt_.options().folder + "/" + checkpoint_dir_name(state_.step);
}

std::string Loop::save_sharded_async(const std::string& key, const std::string& tmp) {
  // Training waits for the host copies only: this rank's shard (and on rank 0 the model, gathered
  // at ZeRO-3 on every rank straight into rank 0's host buffers, and the run state); each rank's
  // writer thread then writes its shard into step_N.tmp/ and publishes it, and rank 0's commits
  // the folder once every shard is there.
  CheckpointContents cc;
  {
    // Cleared on every exit: a failed gather (NCCL error, OOM) must not leave later saves aimed
    // at the async buffers.
    struct Reset {
      bool& flag;
      ~Reset() { flag = false; }
    } reset{gather_into_async_buffers_};
    gather_into_async_buffers_ = true;
    cc = contents();
  }
  update_->shard_contents(cc);
  if (!lead_) cc.model.clear();
  const bool lead = lead_;
  async_->save(state_.step, std::move(cc), [this, key, tmp, lead](int64_t step, CheckpointContents& host) {
    std::vector<CheckpointFile> shards;
    if (const auto mine = write_shard(tmp, host)) {
      shards.push_back(*mine);
      publish_shard(key, *mine);
    }
    if (!lead) return ckpt_.options().folder + "/" + checkpoint_dir_name(step);
    collect_shards(key, shards);
    return ckpt_.commit(step, host, shards);
  });
  saved_step_ = state_.step;
  return ckpt_.options().folder + "/" + checkpoint_dir_name(state_.step);
}

void Loop::log_blocked(std::chrono::steady_clock::time_point t0, const std::string& dir) {
  const double blocked = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("checkpoint of step ", state_.step, ": training blocked ", format_number(blocked, 3), " s (previous write, ",
            update_->zero_stage() == 3 ? "weight gather, " : "", "copies to host); writing ", dir, " in the background");
}

void Loop::publish_shard(const std::string& key, const CheckpointFile& f) {
  if (comm_.distributed() && comm_.rank() != 0)
    comm_.store_set(key + std::to_string(comm_.rank()), f.name + " " + std::to_string(f.bytes) + " " + std::to_string(f.xxh64));
}

void Loop::collect_shards(const std::string& key, std::vector<CheckpointFile>& shards) {
  for (int r = 1; r < update_->shards(); ++r) {  // ranks 1..S-1 hold the other distinct shards
    std::istringstream in(comm_.store_get(key + std::to_string(r)));
    CheckpointFile f;
    in >> f.name >> f.bytes >> f.xxh64;
    LOOM_ASSERT(!in.fail(), "rank ", r, " published a malformed shard entry");
    shards.push_back(f);
  }
}

void Loop::warn_if_global_batch_changed(const std::string& resume_dir) {
  // The packs of one step: micro_bsz x micro_num x world size. A checkpoint saved before its
  // config recorded these keys is compared at the current micro sizes.
  const std::string saved_ini = sys::read_file(resume_dir + "/config.ini");
  auto saved_int = [&](const char* key, int64_t now) -> int64_t {
    const std::string v = ini_value(saved_ini, key);
    try {
      return v.empty() ? now : std::stoll(v);
    } catch (const std::exception&) {
      return now;
    }
  };
  const int64_t old_bsz = saved_int("data.micro_bsz", c_.data.micro_bsz);
  const int64_t old_num = saved_int("data.micro_num", c_.data.micro_num);
  const int64_t old_world = state_.world_size > 0 ? state_.world_size : comm_.world();
  const int64_t before = old_bsz * old_num * old_world;
  const int64_t now = static_cast<int64_t>(loader_.layout().global_batch());
  if (before == now) return;
  log::job_warn("the global batch changes on this resume: ", before, " packs per step (micro_bsz ", old_bsz,
                " x micro_num ", old_num, " x world size ", old_world, ") before, ", now, " now (micro_bsz ",
                c_.data.micro_bsz, " x micro_num ", c_.data.micro_num, " x world size ", comm_.world(),
                "); steps from here see ", now, " packs each, and the learning-rate schedule still counts steps. "
                "Keep the global batch with data.micro_num = ",
                before % (c_.data.micro_bsz * comm_.world()) == 0 ? std::to_string(before / (c_.data.micro_bsz * comm_.world()))
                                                                   : std::string("(none: not divisible)"));
}

CheckpointContents Loop::save_layout() {
  CheckpointContents like;  // what save() and save_sharded_async() hand to async_
  if (lead_) {
    like.model = named_state(*model_);  // at ZeRO-3 the shapes stay while the storage is sharded
    like.optimizer = update_->replicated_state();
  }
  update_->shard_layout(like);
  return like;
}

CheckpointContents Loop::contents() {
  CheckpointContents cc;
  for (const auto& part : checkpointed_) part->save_state(cc);
  cc.config_ini = c_.resolved_ini;  // written for the record, never restored: the run's own config wins
  cc.tokenizer_model = tokenizer_model_;
  return cc;
}

void Loop::probe() {
  if (!c_.monitor.startup_probe) return;
  Watchdog::LongPhase phase(watchdog_, "start-up probe", 0);
  ProbeOptions o;
  o.matmul_n = device_.is_cuda() ? 4096 : 256;
  o.outlier_ratio = c_.monitor.diag_outlier_ratio;
  const ProbeResult p = startup_probe(&comm_, device_, o);
  log::info("start-up probe: ", format_number(p.matmul_tflops, 3), " TFLOP/s fp32 matmul on this rank; ",
            describe(p.matmul, "matmul time", o.outlier_ratio));
  if (!p.allreduce.per_rank.empty()) log::info("start-up probe: ", describe(p.allreduce, "all-reduce time", o.outlier_ratio));
  if (!p.matmul.outliers.empty() || !p.allreduce.outliers.empty())
    alert(AlertLevel::kWarn, "slow ranks at start-up",
          describe(p.matmul, "matmul time", o.outlier_ratio) + "; " + describe(p.allreduce, "all-reduce time", o.outlier_ratio));
}

TrainSummary Loop::run() {
  {
    Watchdog::LongPhase phase(watchdog_, "start-up", 0);
    start();
  }
  if (state_.step > c_.data.total_steps) {
    // Nothing to train, validate or save: the checkpoint is already the run's end.
    log::info("done: the run is already past data.total_steps: resumed at step ", state_.step, ", data.total_steps ",
              c_.data.total_steps, "; nothing to do (raise data.total_steps to train on)");
    summary_.final_step = state_.step;
    return summary_;
  }
  probe();
  startup_.phase("probe");
  alert(AlertLevel::kInfo, "training started",
        "run " + c_.job.run_dir + " at step " + std::to_string(state_.step) + " of " +
            std::to_string(c_.data.total_steps) +
            (comm_.world() > 1 ? ", " + std::to_string(comm_.world()) + " ranks" : std::string()));
  StopSignal signal;
  Profiler profiler(c_.flags.profiling, c_.job.run_dir + "/profile_trace.json");
  first_step_ = state_.step;
  if (lead_) {
    progress_ = std::make_unique<Progress>("train", static_cast<uint64_t>(c_.data.total_steps), "steps");
    progress_->set_base(static_cast<uint64_t>(state_.step));
  }
  while (state_.step < c_.data.total_steps && !should_stop(signal)) {
    StepRecord s = begin_step(profiler);
    next_batches(s);
    forward_backward(s);
    reduce(s, signal.requested());  // the step's figures over all ranks, before the update
    check_spike(s);                 // a spike can still cancel the update
    optimizer_step(s);
    end_step(s);
    if (state_.step == first_step_ + 1) startup_.first_step_done();
    after_step(s);
  }
  profiler.finish();
  finish();
  return summary_;
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
    s.sums.real_tokens += host.segments.ge(0).sum().item<int64_t>();  // on the host copy: no device read-back
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
  try {
    s.sums = accumulate_gradients(s.micro);
  } catch (const c10::OutOfMemoryError& e) {
    report_out_of_memory(e);
    throw;
  }
  s.sums.real_tokens = real_tokens;
  range.end();
  fwd_t_.stop();
  faults_.after_backward(s.index, model_->parameters());
}

void Loop::check_spike(StepRecord& s) {
  if (s.skip_batch || !spike_.enabled()) return;
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

void Loop::end_step(const StepRecord& s) {
  ++state_.step;
  state_.updates = update_->updates();
  state_.sampler = loader_.state();
  state_.consumed_tokens += static_cast<uint64_t>(s.totals.real_tokens);
  // The step ends when the device has run the step's stream (the device timers are read right
  // after, which waits for it anyway). An update overlapped with the next forward (adam.overlap_update)
  // runs on a side stream and is not waited for here: the next step's forward waits for each of
  // its layers, so that step's time holds whatever of the update the overlap did not hide.
#ifdef LOOM_CUDA_KERNELS
  if (device_.is_cuda()) c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(cuda_index())).synchronize();
#else
  if (device_.is_cuda()) torch::cuda::synchronize(cuda_index());  // no overlapped update in this build
#endif
  step_t_.stop();
  if (watchdog_) watchdog_->heartbeat(state_.step);
  if (progress_) progress_->set(static_cast<uint64_t>(state_.step));
  set_phase("between steps");
}

void Loop::after_step(const StepRecord& s) {
  if (!s.skip_batch) {
    ProfileRange range("log");
    log_step(s);
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
  const StopDecision by_file = stop_file_.check(state_.step, &comm_);
  quit_by_file_ = by_file.quit;
  const bool periodic = c_.ckpt.checkpoint_every > 0 && state_.step % c_.ckpt.checkpoint_every == 0;
  if (c_.ckpt.enable_save && (periodic || (by_file.save && !by_file.quit))) summary_.last_checkpoint = save();
}

void Loop::finish() {
  if (!unlogged_.empty()) {
    metrics_->write(unlogged_);
    unlogged_.clear();
  }
  if (progress_) progress_->finish();
  if (state_.step == c_.data.total_steps && !summary_.stopped_by_signal) validate();
  if (c_.ckpt.enable_save && saved_step_ != state_.step) summary_.last_checkpoint = save();
  if (async_) {  // the process must not end mid-write
    const AsyncSaveResult last = async_->wait();
    if (last.ok()) log::info("checkpoint ", last.path, " written (step ", last.step, ")");
    LOOM_CHECK(last.error.empty(), "the last checkpoint (step ", last.step, ") failed: ", last.error);
  }
  summary_.final_step = state_.step;
  const std::string done = "step " + format_count(state_.step) + "/" + format_count(c_.data.total_steps) + ", " +
                           format_count(summary_.steps_done) + " steps this run, " +
                           format_count(state_.consumed_tokens) + " tokens consumed, " +
                           format_count(state_.inf_nan_skips) + " inf/nan skips, " +
                           format_count(state_.spike_skips) + " spike skips" +
                           (summary_.steps_done > 0 ? ", last loss " + format_number(summary_.last_loss) : "");
  log::info("done: ", done);
  alert(AlertLevel::kInfo, summary_.stopped_by_signal ? "training stopped" : "training finished", done);
}

}  // namespace

TrainSummary train(const TrainConfig& config_in, const WeightInit& init_weights) {
  TrainConfig config = config_in;
  const LaunchInfo li = read_launch(process_environment());
  log::set_rank(li.rank);
  log::set_world(li.world);
  if (li.rank != 0) log::set_level(log::Level::kWarn);  // rank 0 speaks for the job; others on trouble
  // LibTorch's own message for a CPU-only build is a dispatcher dump that never says "no CUDA".
  if (torch::Device(config.job.device).is_cuda()) {
    LOOM_CHECK(torch::cuda::is_available(), "job.device=", config.job.device,
               at::hasCUDA() ? ": no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES, the driver)"
                             : ": this loom-train is built without CUDA (its LibTorch is CPU only); use job.device=cpu "
                               "or a CUDA build (docs/GPU.md)");
  }
  // One device per rank: a bare "cuda" means this rank's local GPU.
  if (config.job.device == "cuda") config.job.device = "cuda:" + std::to_string(li.local_rank);
  CommOptions co;
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000));
  co.backend = config.parallel.backend;
  Alerts alerts(config.monitor.alerts, li.rank, li.host);  // first: a failed rendezvous is alerted too
  std::unique_ptr<Communicator> comm_owner;
  try {
    comm_owner = std::make_unique<Communicator>(li, co, torch::Device(config.job.device));
  } catch (const std::exception& e) {
    alerts.send_exception(e.what());
    alerts.flush(config.monitor.alerts.timeout_s);
    throw;
  }
  Communicator& comm = *comm_owner;
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<RunDirLock> run_dir_lock;
  try {
    if (config.job.run_dir.empty()) set_run_dir(config, "runs/" + run_dir_name(shared_launch_time(comm)));
    const std::vector<RankRow> table =
        gather_rank_table(comm, RankRow{li.rank, li.local_rank, li.host, config.job.device});
    if (li.world > 1)
      log::info(li.launcher, " launch, ", li.world, " ranks, backend ", comm.backend_name(), ":\n",
                format_rank_table(table));
    log::info("loom-train configuration (what differs from the defaults; every key in ", config.job.run_dir,
              "/config.ini):\n", config.changed_ini.empty() ? std::string("(all defaults)\n") : config.changed_ini);
    // Rank 0 locks the folder before anything is written there, and holds it until the run ends.
    if (li.rank == 0) {
      run_dir_lock = std::make_unique<RunDirLock>(config.job.run_dir);
      if (config.flags.resume.empty())
        prepare_fresh_run_dir(config.job.run_dir, config.ckpt.folder, config.job.overwrite, config.flags.init_from);
      sys::AtomicFile ini(config.job.run_dir + "/config.ini");  // this run's; each checkpoint keeps its own
      ini.write(config.resolved_ini);
      ini.commit();
    }
    comm.barrier();
    if (config.monitor.hang_timeout > 0) {
      watchdog = std::make_unique<Watchdog>(config.monitor.hang_timeout, &alerts);
      watchdog->set_on_hang([&comm](const std::string& report) { comm.report_failure("hang watchdog: " + report); });
    }
    Loop loop(config, init_weights, comm, alerts, watchdog.get());
    return loop.run();
  } catch (const std::exception& e) {
    comm.report_failure(e.what());  // the other ranks' reports name this cause
    alerts.send_exception(e.what());
    alerts.flush(config.monitor.alerts.timeout_s);
    throw;
  }
}

}  // namespace loom
