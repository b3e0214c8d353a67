// loom-train's configuration: one options struct per INI section (names follow InternLM's config
// where it has one), each default written once, as the member's initializer. train_options()
// declares every key once (help, check) bound to its field; --help, the parse, the checks and the
// INI dumps all come from that declaration. docs/TRAIN.md lists every key.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "alerts.h"
#include "checkpoint.h"
#include "data_parallel.h"
#include "dataset.h"
#include "loom/option_table.h"
#include "lr_schedule.h"
#include "model.h"
#include "optim_options.h"
#include "optimizer.h"
#include "spike_detector.h"

namespace loom {

// One struct per INI section, each holding exactly that section's keys; where a subsystem reads a
// whole section, the section is its own options struct ([data] DataOptions, [model] ModelOptions,
// [ckpt] CheckpointOptions, [parallel] ParallelOptions).

// [job]
struct JobOptions {
  std::string run_dir;             // job.run_dir: metrics.jsonl, tensorboard/, checkpoints/
  std::string device = "cpu";      // job.device: cpu, cuda, cuda:N
  std::string attention = "auto";  // job.attention: auto, cudnn, flash, segments or masked (attention_select.h)
  uint64_t seed = 1024;            // job.seed: model initialisation (torch's default generator)
  int64_t threads = 0;             // job.threads: torch intra-op threads (0 = LibTorch's default)
  int64_t log_every = 1;           // job.log_every
  double peak_tflops = 0;          // job.peak_tflops: per-device peak for MFU (0 = auto, from the GPU's name)
  bool tensorboard = true;         // job.tensorboard
  bool overwrite = false;          // job.overwrite: a fresh run moves an earlier run in run_dir aside (run_dir.h)
  bool deterministic = false;      // job.deterministic: bitwise-repeatable runs (determinism.h)
};

// Command-line switches that are no INI key: how the run starts, what it profiles.
struct FlagOptions {
  std::string resume;              // --resume: "" (none), "auto", "auto-or-fresh", or a step_N folder
  std::string init_from;           // --init-from: a step_N folder (weights only)
  std::string init_from_hf;        // --init-from-hf: a Hugging Face folder (weights only, hf_import.h)
  bool profiling = false;          // --profiling
  bool profile_memory = false;     // --profile-memory: device memory breakdown at step 2 (CUDA)
  void validate() const;           // resume, init_from and init_from_hf exclude each other
};

// [adam], [hybrid_zero_optimizer] and [lr_scheduler]: AdamOptions, HybridZeroOptions and
// LrSchedulerOptions (optim_options.h), the structs the optimizer and the schedule take views of.

// [loss]
struct LossOptions {
  double label_smoothing = 0.0;    // loss.label_smoothing
};

// [monitor]: monitoring and fault tolerance (docs/MONITOR.md).
struct MonitorOptions {
  AlertOptions alerts;             // monitor.alert_webhook, monitor.alert_command, monitor.alert_timeout_s
  double hang_timeout = 0;         // monitor.hang_timeout: seconds without a finished step (0 = off)
  SpikeOptions spike;              // monitor.spike_ratio, monitor.spike_window, monitor.skip_spike_batches
  int64_t diag_every = 0;          // monitor.diag_every: steps between per-rank step-time reports (0 = off)
  double diag_outlier_ratio = 1.5; // monitor.diag_outlier_ratio
  bool startup_probe = true;       // monitor.startup_probe: matmul (+ all-reduce) probe at start
};

// [debug]: TEST ONLY fault injection (-1 = off), played by the loop's FaultInjector.
struct DebugOptions {
  int64_t inject_nan_step = -1;    // debug.inject_nan_step: poisons that step's gradients
  int64_t stop_at_step = -1;       // debug.stop_at_step: acts as a SIGTERM once step N is done
  int64_t pause_at_step = -1;      // debug.pause_at_step: once step N is done, waits for SIGTERM/SIGINT
  int64_t hang_at_step = -1;       // debug.hang_at_step: that step's forward never ends
  int64_t spike_at_step = -1;      // debug.spike_at_step: that step's loss looks 100x larger
  int64_t kill_at_step = -1;       // debug.kill_at_step: SIGKILL in that step's forward
  int64_t kill_in_save = -1;       // debug.kill_in_save: SIGKILL inside the save of step N
  int64_t fail_save_at_step = -1;  // debug.fail_save_at_step: this rank's part of the save of step N throws
  int64_t kill_at_layer = -1;      // debug.kill_at_layer: with kill_at_step, SIGKILL before that layer's forward
};

struct TrainConfig {
  JobOptions job;
  FlagOptions flags;
  DataOptions data;
  ModelOptions model;
  AdamOptions adam;
  HybridZeroOptions hybrid_zero_optimizer;
  LrSchedulerOptions lr_scheduler;
  LossOptions loss;
  CheckpointOptions ckpt;
  ParallelOptions parallel;
  MonitorOptions monitor;
  DebugOptions debug;
  std::string resolved_ini;  // every key's final value, saved in run_dir/config.ini and with checkpoints
  std::string changed_ini;   // the keys that differ from their defaults, printed at start

  // The optimizer's and the schedule's options span sections: assembled here, in one place.
  OptimizerOptions optimizer_options() const;  // adam.*, hybrid_zero_optimizer.clip_grad_norm
  LrScheduleOptions lr_schedule_options() const;  // lr_scheduler.*, adam.lr, data.total_steps
};

// Every key (and command-line flag) of loom-train, bound to c's fields; each key's default is its
// field's value now, so a default-constructed c gives the defaults. Checks per section, each in one
// place: those of [job] [loss] [ckpt] and [monitor]'s own keys in the table; [data] [model] [adam]
// [hybrid_zero_optimizer] [parallel], monitor's alert keys and the flags by their struct's
// validate(), which the subsystem that takes the struct calls too; [lr_scheduler] by LrSchedule.
OptionTable train_options(TrainConfig& c);

// nullopt when --help was printed. Throws UsageError (exit 2) on unknown keys or bad values, naming
// the key: a value that does not parse, or one outside its range or size limit (size_limits.h).
std::optional<TrainConfig> parse_train_config(const std::vector<std::string>& args);

// The keys of [model] that change the function the weights compute, where two INI texts (a
// checkpoint's config.ini and this run's resolved INI) differ: "model.KEY: SAVED -> NOW" each.
// Keys that change only memory, precision or initialisation (checkpoint, dtype, init_std...) are
// not compared, nor keys the saved text lacks.
std::vector<std::string> model_key_differences(const std::string& saved_ini, const std::string& run_ini);

// The value text of "section.key" in an INI text as resolved_ini writes it; "" when it is absent.
std::string ini_value(const std::string& ini, const std::string& key);

// data.global_batch_size, once the world size is known (at launch): data.micro_num =
// global_batch_size / (micro_bsz * world), written into the resolved INI too. Throws loom::Error when
// it does not divide, or when micro_num was given (not its default) and disagrees. 0 = nothing to do.
void derive_micro_num(TrainConfig& c, int64_t world);

// Sets job.run_dir after parsing (the launch names it when the config does not), the checkpoint
// folder with it when that was defaulted, and the resolved INI text.
void set_run_dir(TrainConfig& c, const std::string& dir);

}  // namespace loom
