// Loop's constructor, its start-up phases and run(): the order of things. The stages of one step
// are in loop_step.cpp, train() (launch, communicator, locks) in train.cpp.
#include <chrono>
#include <cmath>

#include "flops.h"
#include "fp8_linear.h"
#include "health_check.h"
#include "loom/log.h"
#include "loop.h"
#include "data_manifest.h"
#include "model_state.h"
#include "plan_command.h"
#include "run_state.h"

namespace loom {

Loop::Loop(const TrainConfig& c, const WeightInit& init_weights, Communicator& comm, Alerts& alerts, Watchdog* watchdog)
    : c_(c),
      init_weights_(init_weights),
      comm_(comm),
      alerts_(alerts),
      watchdog_(watchdog),
      lead_(comm.rank() == 0),
      device_(c.job.device),
      data_(c.data, comm.rank(), comm.world()),  // train() builds the Loop under the start-up rule
      loader_(data_, c.data, comm.rank(), comm.world()),
      schedule_(c.lr_schedule_options()),
      ckpt_(c.ckpt),
      spike_(c.monitor.spike),
      stop_file_(c.ckpt.stop_file, comm.rank() == 0),
      faults_(c.debug),
      fwd_t_(device_.is_cuda() ? cuda_index() : -1),
      opt_t_(device_.is_cuda() ? cuda_index() : -1) {}

void Loop::start() {
  index_data();
  const MemoryPlan plan = plan_memory_and_attention();
  build_model(plan);
  startup_.phase("model plan, build and init");
  build_update();
  startup_.phase("optimizer");
  const int64_t keep_logs_through = resume_or_init();
  startup_.phase("weights (resume, init-from, broadcast)");
  open_saver();
  open_sinks(keep_logs_through);
}

void Loop::index_data() {
  if (c_.job.threads > 0) torch::set_num_threads(static_cast<int>(c_.job.threads));
  if (device_.is_cpu()) keep_freed_memory_in_heap();
  LOOM_CHECK(static_cast<int64_t>(data_.vocab_size()) <= c_.model.vocab_size, "model.vocab_size ",
             c_.model.vocab_size, " is smaller than the data's vocabulary ", data_.vocab_size());
  data_.log_summary(loader_.layout().global_batch(), c_.data.total_steps);
  tokenizer_model_ = read_tokenizer_model(c_.data, data_);
  state_.data_json = manifest_of(data_, c_.data.seq_len).to_json();  // what every checkpoint records
  if (!c_.data.valid_folder.empty())
    valid_ = std::make_unique<ValidationSets>(c_.data, comm_.rank(), comm_.world(), &data_);
  startup_.phase("data index");
}

MemoryPlan Loop::plan_memory_and_attention() {
  // The attention kernel first: the plan's activation bytes are that kernel's. Then the plan,
  // before any model tensor exists: it resolves model.checkpoint=auto and refuses a run that
  // cannot fit.
  const AttentionCaps caps = probe_attention_caps(device_, c_.model.head_dim());
  const AttentionPlan attention =
      choose_attention(caps, c_.model.dtype, c_.model.head_dim(), parse_attention_kernel(c_.job.attention),
                       c_.job.deterministic);
  attention_ = attention.kernel;
  const MemoryPlan plan = plan_for_run(c_, comm_.world(), device_, caps);
  LOOM_ASSERT(plan.in.attention == attention_, "the plan and the run chose different attention kernels");
  log::info(plan.to_text());
  log::info("attention: ", attention_kernel_key(attention_), ": ", attention_kernel_name(attention_),
            attention.why.empty() ? "" : " " + attention.why);
  if (c_.model.checkpoint_auto)
    log::info("model.checkpoint=auto: ", plan.checkpointed_layers, " of ", c_.model.num_layers, " layers recomputed (",
              plan.in.model.checkpoint, ")");
  if (fp8_weight_cache_wanted(c_) && !plan.in.model.fp8_weight_cache)
    log::info("model.precision=fp8: the weights are quantized every micro-batch; keeping their e4m3 copies for the "
              "step would recompute more layers or not fit");
  LOOM_CHECK(plan.fits || plan.in.device_bytes == 0, plan.refusal(device_.str()));
  if (c_.model.fp8) {
    std::string why;
    LOOM_CHECK(fp8_supported(device_, &why), "model.precision=fp8: ", why, " (model.precision=bf16 runs here)");
  }
  return plan;
}

void Loop::build_model(const MemoryPlan& plan) {
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
  const AttentionShape shape{c_.model.num_attention_heads, c_.model.kv_heads(), c_.data.seq_len,
                             plan.checkpointed_layers > 0, c_.data.micro_bsz};
  model_->set_attention(
      make_attention_kernel(attention_, device_, c_.model.dtype, c_.model.head_dim(), shape, attention_use_));
  flops_per_token_ = model_flops_per_token(model_->options(), c_.data.seq_len);
  std::string peak_source;
  peak_tflops_ = resolve_peak_tflops(c_.job.peak_tflops, device_, &peak_source);
  if (peak_tflops_ > 0)
    log::info("mfu: against ", format_number(peak_tflops_, 4), " TFLOP/s, ", peak_source,
              c_.model.fp8 ? " (an fp8 run measured against the bf16 peak)" : "");
  else
    log::info("mfu: none (", peak_source, ")");
}

void Loop::build_update() {
  update_ = std::make_unique<DataParallelUpdate>(comm_, named_state(*model_), c_.optimizer_options(), c_.parallel);
  if (c_.model.fp8) update_->publish_fp8_weight_amax();
  log::info("model: ", format_count(static_cast<int64_t>(model_->num_parameters())), " parameters, ", update_->num_decay(),
            " tensors with weight decay, ", update_->num_no_decay(), " without; ", format_number(flops_per_token_ / 1e9, 3),
            " GFLOP per token");
  log::info("update: ", update_->describe());
  LayerHooks* hooks = update_->layer_hooks();
  if (faults_.kills_in_layers()) {
    fault_hooks_ = std::make_unique<FaultLayerHooks>(faults_, state_.step, hooks);
    hooks = fault_hooks_.get();
  }
  model_->set_layer_hooks(hooks);
  // What a checkpoint holds, in load order: the optimizer after the model (its master weights).
  checkpointed_.push_back(std::make_unique<RunState>(state_, loader_, spike_, *update_, comm_.world()));
  checkpointed_.push_back(std::make_unique<ModuleState>(*model_));
  checkpointed_.push_back(std::make_unique<OptimizerState>(*update_));
}

int64_t Loop::resume_or_init() {
  const std::string resume_dir = resolve_resume_dir(c_.flags.resume, ckpt_, c_.resolved_ini);
  int64_t keep_logs_through = -1;
  if (!resume_dir.empty()) {
    const std::string data_now = state_.data_json;
    for (const auto& part : checkpointed_) part->load_state(resume_dir);
    check_resumed_data(resume_dir, state_.data_json, data_, c_.data.seq_len, state_.sampler.consumed_samples);
    state_.data_json = data_now;  // new checkpoints record this run's data
    if (tokenizer_model_.empty()) tokenizer_model_ = tokenizer_from_checkpoint(resume_dir, data_);
    LOOM_CHECK(update_->updates() == state_.updates, resume_dir, ": optimizer step ", update_->updates(),
               " disagrees with state.json updates ", state_.updates);
    if (state_.step < c_.data.total_steps)  // a run already past its end trains nothing (Loop::run)
      schedule_ = LrSchedule(
          schedule_on_resume(resume_dir, c_.lr_schedule_options(), c_.lr_scheduler.on_resume, state_.updates));
    keep_logs_through = state_.step;
    saved_step_ = state_.step;
    log::info("resumed from ", resume_dir, ": step ", state_.step, ", ", state_.updates, " updates, ",
              state_.sampler.consumed_samples, " samples consumed",
              comm_.world() > 1 || state_.world_size > 1 ? str(" (saved at world size ", state_.world_size, ")") : "");
    warn_if_global_batch_changed(resume_dir, c_.data, state_.world_size, comm_.world(),
                                 static_cast<int64_t>(loader_.layout().global_batch()));
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
  state_.sampler = loader_.state();
  return keep_logs_through;
}

void Loop::open_saver() {
  if (!c_.ckpt.enable_save) return;
  SaveSources src;
  src.model = model_.get();
  src.update = update_.get();
  for (const auto& part : checkpointed_) src.parts.push_back(part.get());
  src.config_ini = c_.resolved_ini;
  src.tokenizer_model = tokenizer_model_;
  src.lr_schedule_ini = schedule_ini(schedule_.options());  // after a resume chose it
  saver_ = std::make_unique<CheckpointSaver>(ckpt_, comm_, std::move(src), faults_, alerts_, c_.ckpt.async_save,
                                             device_.is_cuda() ? cuda_index() : -1);
}

void Loop::open_sinks(int64_t keep_logs_through) {
  if (!lead_) return;
  auto sinks = std::make_unique<MetricsFanout>();
  sinks->add(std::make_unique<JsonlSink>(c_.job.run_dir + "/metrics.jsonl", keep_logs_through));
  if (c_.job.tensorboard)
    sinks->add(std::make_unique<TensorBoardSink>(c_.job.run_dir + "/tensorboard", keep_logs_through));
  metrics_ = std::make_unique<MetricsProcessor>(metrics_setup(), std::move(sinks));
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
    const Watchdog::StartupPhase phase(watchdog_);
    start();
  }
  if (saved_step_ >= 0 && state_.step >= c_.data.total_steps) {
    // Nothing to train, validate or save: the checkpoint is already the run's end, and its step
    // is in the logs once (a make rerun after touching an input lands here).
    log::info("done: the run is ", state_.step > c_.data.total_steps ? "already past" : "at",
              " data.total_steps: resumed at step ", state_.step, ", data.total_steps ", c_.data.total_steps,
              "; nothing to do (raise data.total_steps to train on)");
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
  signal_ = &signal;
  Profiler profiler(c_.flags.profiling, c_.job.run_dir + "/profile_trace.json");
  first_step_ = state_.step;
  if (lead_) {
    progress_ = std::make_unique<Progress>("train", static_cast<uint64_t>(c_.data.total_steps), "steps");
    progress_->set_base(static_cast<uint64_t>(state_.step));
    progress_->show_eta(false);  // the metrics line has the run's one ETA, validation counted
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
  signal_ = nullptr;
  return summary_;
}

}  // namespace loom
