// The Loop behind train() (trainer.h), for the loop's own .cpp files only: trainer.cpp orders the
// start-up and the steps, loop_step.cpp holds the stages of one step. The pieces it orders each
// live in their own folder (docs/ARCHITECTURE.md); saves are CheckpointSaver's, start-up jobs
// startup.h's, the FLOP conventions flops.h's.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alerts.h"
#include "attention_select.h"
#include "checkpoint_saver.h"
#include "communicator.h"
#include "data_parallel.h"
#include "evaluator.h"
#include "fault_injector.h"
#include "host_copy.h"
#include "loader.h"
#include "lr_schedule.h"
#include "memory_plan.h"
#include "metrics_processor.h"
#include "profiling.h"
#include "spike_detector.h"
#include "startup.h"
#include "stop_file.h"
#include "stop_signal.h"
#include "timer.h"
#include "train_state.h"
#include "trainer.h"
#include "watchdog.h"
#include "loom/progress.h"

#ifdef LOOM_CUDA_KERNELS
#include "cuda_batch_transfer.h"
#endif

namespace loom {

// Sums of one step's micro-batches on this rank.
struct StepSums {
  torch::Tensor loss_sum, correct;  // detached scalars
  torch::Tensor ds_loss, ds_tokens, ds_correct;
  int64_t loss_tokens = 0;            // tokens with a label, this rank
  torch::Tensor global_loss_tokens;   // [1] float64 on the communicator's device: all ranks' (distributed only)
  int64_t real_tokens = 0;   // tokens inside segments (not padding), this rank
  double executed_flops = 0;  // FLOPs the kernels run on this rank's packs (flops.h's executed_flops)
};

// A step's sums over every rank, on the host, plus the ranks' agreement to stop.
struct StepTotals {
  double loss_sum = 0, correct = 0, real_tokens = 0;
  double loss_tokens = 0;  // all ranks: the loss divisor
  double executed_flops = 0;
  std::vector<double> ds_loss, ds_tokens, ds_correct;
  bool stop = false;   // a signal reached some rank
  StopDecision file;   // ckpt.stop_file's command for the steps done after this one (rank 0 read it)
};

// What one step carries from one stage of Loop::run to the next.
struct StepRecord {
  int64_t index = 0;        // 0-based index of this step (data.skip_batches counts these)
  bool skip_batch = false;  // data.skip_batches: the data is consumed, nothing computed or updated
  double lr = 0;
  std::vector<Batch> micro;
  StepSums sums;
  HostCopy sums_on_host;     // reduce()'s vector on its way to the host
  bool have_totals = false;  // totals read from it (read_totals)
  StepTotals totals;
  bool spike_skip = false;  // a loss spike cancels the update (monitor.skip_spike_batches)
  OptimizerStepResult result;
};

class Loop {
 public:
  Loop(const TrainConfig& c, const WeightInit& init_weights, Communicator& comm, Alerts& alerts, Watchdog* watchdog);
  TrainSummary run();

 private:
  // Start-up (trainer.cpp), in the order start() calls them.
  void start();
  void index_data();
  MemoryPlan plan_memory_and_attention();
  void build_model(const MemoryPlan& plan);
  void build_update();
  int64_t resume_or_init();  // the step whose logs a resumed run keeps (-1: fresh)
  void open_saver();
  void open_sinks(int64_t keep_logs_through);
  // After start(), when run() knows there are steps to train: the start-up probe.
  void probe();

  // One step (loop_step.cpp), in the order run() calls them.
  bool should_stop(const StopSignal& signal);
  StepRecord begin_step(Profiler& profiler);
  void next_batches(StepRecord& s);
  void forward_backward(StepRecord& s);
  void reduce(StepRecord& s, bool stop_here);
  void check_spike(StepRecord& s);
  void optimizer_step(StepRecord& s);
  void end_step(StepRecord& s);
  void after_step(const StepRecord& s);  // metrics, health report, validation, checkpoint, stop file
  void finish();                          // the last checkpoint and validation, the summary

  StepSums accumulate_gradients(std::vector<Batch>& micro);
  void read_totals(StepRecord& s);  // waits for reduce()'s vector, once
  bool logs_step() const;           // whether the step just ended is one the metrics record
  bool times_step() const;          // ... or one whose device time a figure needs
  void count_step();                // rank 0: the step's data mix and attention calls
  void log_step(const StepRecord& s);
  MetricsSetup metrics_setup() const;  // what the metrics processor needs to know of the run
  void validate();
  void save();
  Batch to_device(const Batch& host);
  void profile_memory();
  void report_out_of_memory(const c10::OutOfMemoryError& e);
  void set_phase(const char* phase) {
    if (watchdog_) watchdog_->set_phase(phase);
  }
  // Alerts that speak for the job come from rank 0 only (each rank alerts its own exceptions).
  void alert(AlertLevel level, const std::string& title, const std::string& body) {
    if (lead_) alerts_.send(level, title, body);
  }
  int cuda_index() const { return device_.has_index() ? device_.index() : 0; }

  const TrainConfig& c_;
  const WeightInit& init_weights_;
  Communicator& comm_;
  Alerts& alerts_;
  Watchdog* watchdog_;  // null: monitor.hang_timeout = 0
  bool lead_;           // writes the logs, TensorBoard and the shared checkpoint files
  torch::Device device_;
  StartupClock startup_;  // before data_: its first phase is the data index
  TrainData data_;
  Loader loader_;
  std::unique_ptr<ValidationSets> valid_;
  InternLM model_{nullptr};
  AttentionKernel attention_ = AttentionKernel::kMasked;
  std::shared_ptr<AttentionUse> attention_use_ = std::make_shared<AttentionUse>();
  std::unique_ptr<DataParallelUpdate> update_;
  std::unique_ptr<FaultLayerHooks> fault_hooks_;  // debug.kill_at_layer
  std::vector<std::unique_ptr<Stateful>> checkpointed_;  // what a checkpoint holds, in load order
  LrSchedule schedule_;
  Checkpointer ckpt_;
  std::unique_ptr<CheckpointSaver> saver_;  // null: ckpt.enable_save_ckpt=false
  SpikeDetector spike_;
  StopFile stop_file_;
  FaultInjector faults_;
  std::unique_ptr<MetricsProcessor> metrics_;  // rank 0: rates, ETA, data mix; metrics.jsonl, the log line, TensorBoard
  TrainState state_;
  Timer data_t_, step_t_;
  // Device time on a CUDA device (CUDA events): fwd_bwd_time + optimizer_time fit inside step_time.
  DeviceTimer fwd_t_, opt_t_;
  std::unique_ptr<Progress> progress_;  // rank 0: step N/total, rate (the ETA is the metrics line's)
  std::optional<StepRecord> unlogged_;  // the last step when job.log_every passed it over (finish() logs it)
  double flops_per_token_ = 0;          // model FLOPs (6N + 12LCT, flops.h)
  double peak_tflops_ = 0;              // 0: no mfu field
  int64_t first_step_ = 0;      // state_.step when this process started
  uint64_t first_tokens_ = 0;   // state_.consumed_tokens then
  const StopSignal* signal_ = nullptr;  // run()'s, while it runs
  bool stop_agreed_ = false;    // a signal reached some rank: every rank stops after the same step
  bool quit_by_file_ = false;   // ckpt.stop_file's +N
  int64_t saved_step_ = -1;
  std::string tokenizer_model_;  // data.tokenizer's bytes, copied into every checkpoint
  TrainSummary summary_;
#ifdef LOOM_CUDA_KERNELS
  std::unique_ptr<cuda::BatchTransfer> transfer_;
#endif
};

}  // namespace loom
