// The start-up's jobs that are not the loop's own state, one function each (Loop::start orders
// them): how long each phase took, the tokenizer the data was made with, the checkpoint a run
// resumes from and what may differ from it, the peak the MFU is measured against.
#pragma once

#include <chrono>
#include <string>

#include <torch/torch.h>

#include "checkpoint.h"
#include "communicator.h"
#include "config.h"
#include "dataset.h"
#include "lr_schedule.h"

namespace loom {

// The start-up's phases, one log line each as it ends (seconds, host RSS).
class StartupClock {
 public:
  void phase(const char* what);
  // After the first step: its phase, then launch -> first step and the host's peak RSS so far.
  void first_step_done();

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// CPU training frees and allocates the same activation sizes every step: keep freed memory in the
// heap (glibc's mallopt) unless the user tunes glibc through its own MALLOC_*_ variables.
void keep_freed_memory_in_heap();

// data.tokenizer's bytes, checked against the fingerprint the data records ("" when unset).
std::string read_tokenizer_model(const DataOptions& data, const TrainData& train_data);

// The step_N folder --resume names ("" = start fresh): auto walks back past damaged checkpoints
// (all damaged: an error, or fresh with auto-or-fresh); a named folder is validated. Refuses a
// checkpoint whose model.* keys differ from run_ini's.
std::string resolve_resume_dir(const std::string& resume, const Checkpointer& ckpt, const std::string& run_ini);

// The schedule's keys as INI text (adam.lr, data.total_steps, lr_scheduler.*; doubles in 17
// digits): what a checkpoint records as lr_schedule.ini, the schedule it trained under.
std::string schedule_ini(const LrScheduleOptions& o);

// The learning-rate schedule a resumed run follows. The checkpoint's lr_schedule.ini (else, in a
// checkpoint from before it, its config.ini) holds the keys it trained under, on_resume=keep
// included; when they differ from `now`, one line names each difference and on_resume
// (lr_scheduler.on_resume) decides: "refuse" (loom::UsageError naming the differences and both
// other choices), "apply" (now's keys from this update on; the lr before and after is logged),
// "keep" (the checkpoint's keys; past its total_steps the lr holds eta_min). `updates` is the
// resumed optimizer's count. Keys a checkpoint's config.ini lacks are taken as unchanged.
LrScheduleOptions schedule_on_resume(const std::string& resume_dir, const LrScheduleOptions& now,
                                     const std::string& on_resume, int64_t updates);

// A resume onto data other than the checkpoint's record (saved_json, state.json's "data"; "" for a
// checkpoint from before the record): another tokenizer is refused (loom::Error); other datasets,
// shards, weights or seq_len are one warning that says what the sampler does with them.
void check_resumed_data(const std::string& resume_dir, const std::string& saved_json, const TrainData& data,
                        int64_t seq_len, uint64_t consumed_samples);

// The tokenizer.model a resumed run keeps writing into its checkpoints when data.tokenizer is not
// given: the checkpoint's, if the data was tokenized with it (its XXH64 is the data's fingerprint).
std::string tokenizer_from_checkpoint(const std::string& resume_dir, const TrainData& data);

// One warning when the packs of a step differ from the checkpoint's (micro_bsz x micro_num x world).
void warn_if_global_batch_changed(const std::string& resume_dir, const DataOptions& data, int64_t saved_world,
                                  int64_t world, int64_t global_batch_now);

// job.peak_tflops resolved: the configured value, else (0 = auto) the device's known dense bf16
// peak (device_peak.h), else 0: no MFU is reported. *source says which, for the log.
double resolve_peak_tflops(double configured, const torch::Device& device, std::string* source);

}  // namespace loom
