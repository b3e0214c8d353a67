// loom-train's configuration: every key registered once with loom::OptionParser (INI sections and
// names follow InternLM's config where it has one), parsed into each piece's typed options struct.
// docs/TRAIN.md lists every key.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "alerts.h"
#include "checkpoint.h"
#include "data_parallel.h"
#include "dataset.h"
#include "lr_schedule.h"
#include "model.h"
#include "optimizer.h"
#include "spike_detector.h"

namespace loom {

// The loop's own keys.
struct LoopOptions {
  int64_t total_steps = 100;       // data.total_steps
  int64_t valid_every = 0;         // data.valid_every (0 = only at the end)
  int64_t checkpoint_every = 0;    // ckpt.checkpoint_every (0 = only at the end)
  bool save_ckpt = true;           // ckpt.enable_save_ckpt
  int64_t log_every = 1;           // job.log_every
  double label_smoothing = 0.0;    // loss.label_smoothing
  std::string run_dir;             // job.run_dir: metrics.jsonl, tensorboard/, checkpoints/
  std::string device = "cpu";      // job.device: cpu, cuda, cuda:N
  std::string attention = "auto";  // job.attention: auto, flash, segments or masked (flash_attention.h)
  uint64_t seed = 1024;            // job.seed: model initialisation (torch's default generator)
  int64_t threads = 0;             // job.threads: torch intra-op threads (0 = LibTorch's default)
  double peak_tflops = 1.0;        // job.peak_tflops: per-device peak for MFU (dtype of the run)
  bool tensorboard = true;         // job.tensorboard
  std::string resume;              // --resume: "" (none), "auto", or a step_N folder
  std::string init_from;           // --init-from: a step_N folder (weights only)
  std::string init_from_hf;        // --init-from-hf: a Hugging Face folder (weights only, hf_import.h)
  bool profiling = false;          // --profiling
  bool profile_memory = false;     // --profile-memory: device memory breakdown at step 2 (CUDA)
  int64_t inject_nan_step = -1;    // debug.inject_nan_step: TEST ONLY, poisons that step's gradients
  int64_t stop_at_step = -1;       // debug.stop_at_step: TEST ONLY, acts as a SIGTERM once step N is done
};

// Monitoring and fault tolerance (docs/MONITOR.md).
struct MonitorOptions {
  AlertOptions alerts;             // monitor.alert_webhook, monitor.alert_command, monitor.alert_timeout_s
  double hang_timeout = 0;         // monitor.hang_timeout: seconds without a finished step (0 = off)
  SpikeOptions spike;              // monitor.spike_ratio, monitor.spike_window, monitor.skip_spike_batches
  int64_t diag_every = 0;          // monitor.diag_every: steps between per-rank step-time reports (0 = off)
  double diag_outlier_ratio = 1.5; // monitor.diag_outlier_ratio
  bool startup_probe = true;       // monitor.startup_probe: matmul (+ all-reduce) probe at start
  std::string stop_file;           // ckpt.stop_file: InternLM's stop file ("" = off)
  bool async_save = false;         // ckpt.async_save: write checkpoints from a background thread
  int64_t hang_at_step = -1;       // debug.hang_at_step: TEST ONLY, that step's forward never ends
  int64_t spike_at_step = -1;      // debug.spike_at_step: TEST ONLY, that step's loss looks 100x larger
  int64_t kill_at_step = -1;       // debug.kill_at_step: TEST ONLY, SIGKILL in that step's forward
  int64_t kill_in_save = -1;       // debug.kill_in_save: TEST ONLY, SIGKILL inside the save of step N
};

struct TrainConfig {
  ModelOptions model;
  DataOptions data;
  OptimizerOptions optimizer;
  LrScheduleOptions lr;
  CheckpointOptions ckpt;
  LoopOptions loop;
  ParallelOptions parallel;
  MonitorOptions monitor;
  std::string resolved_ini;  // every key's final value, printed at start and saved with checkpoints
};

// nullopt when --help was printed. Throws loom::Error on unknown keys or bad values (naming the key).
std::optional<TrainConfig> parse_train_config(const std::vector<std::string>& args);

// Sets job.run_dir after parsing (the launch names it when the config does not), the checkpoint
// folder with it when that was defaulted, and the resolved INI text.
void set_run_dir(TrainConfig& c, const std::string& dir);

}  // namespace loom
