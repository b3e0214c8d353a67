// The one metrics processor of the loop (torchtitan keeps one too): rank 0 hands it each step's
// figures and each validation's results; it derives the rates (tokens/s, tgs, TFLOP/s, MFU, HFU),
// the per-dataset figures, the run's one ETA (eta.h: validation counted), the data-mix and
// attention-branch lines, and fans each record out to metrics.jsonl, TensorBoard and the log line.
// The loop hands it every step's counts (cheap, on the host) and a record's figures only on the
// steps it logs (job.log_every, the run's last step): reading them waits for the device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "eta.h"
#include "metrics.h"

namespace loom {

// The realised mixture for the log: "data mix steps 11-20: web 75.0% code 25.0%" (dataset.h's
// mixture_line) over the steps since the last metrics line, printed at the first metrics line and
// then only when some dataset's share moved by kMixChangePoints or more since the line last printed.
class MixTracker {
 public:
  static constexpr double kMixChangePoints = 1.0;  // percentage points
  explicit MixTracker(std::vector<std::string> names) : names_(std::move(names)) {}
  // The samples per dataset of step `step`'s global batch.
  void add(int64_t step, const std::vector<uint64_t>& counts);
  // At a metrics line: the mix line of the steps since the last call, or "" when it is not worth a
  // line (unchanged, or a single dataset). Starts the next window.
  std::string take_line(int64_t step);

 private:
  std::vector<std::string> names_;
  std::vector<uint64_t> counts_;    // the window's samples per dataset
  int64_t first_step_ = -1;         // the window's first step
  std::vector<double> printed_;     // the shares (%) of the line last printed
};

struct MetricsSetup {
  int64_t total_steps = 0;
  double world = 1;                // ranks, one device each
  double tokens_per_device = 0;    // global batch * seq_len / world: the packs one device computes (padding included)
  double flops_per_token = 0;      // model FLOPs (flops.h)
  double peak_tflops = 0;          // 0: no mfu or hfu field
  bool attention_branches = false; // cuDNN's segment attention: log which branch the steps take
  std::vector<std::string> dataset_names;
  EtaOptions eta;
};

// A logged step's figures, all ranks summed, as the loop has them.
struct StepFigures {
  MetricFields fields;  // the loop's own fields, "step" first
  double step_time = 0, real_tokens = 0, executed_flops = 0;
  std::vector<double> ds_loss, ds_tokens, ds_correct;  // per dataset
};

class MetricsProcessor {
 public:
  // sinks: metrics.jsonl and TensorBoard (the log line is the processor's own); clock: seconds.
  MetricsProcessor(MetricsSetup setup, std::unique_ptr<MetricsFanout> sinks, std::function<double()> clock = {});

  // Every step: the samples per dataset of its global batch, rank 0's attention calls of each
  // branch (cuDNN's segment attention). A line when the branch changes.
  void count(int64_t step, const std::vector<uint64_t>& mix, int64_t per_document, int64_t windows);
  // A logged step: its record to every sink and the log line with the ETA, then the data-mix line
  // when the mix moved.
  void on_step(StepFigures s);
  // A validation that ran `seconds`; fields: "step" then val/NAME_loss, _acc, _plex.
  void on_validation(const MetricFields& fields, double seconds);
  double eta(int64_t step) const { return eta_.eta(step); }

 private:
  void add_rates(StepFigures& s) const;
  void write(const MetricFields& f);

  MetricsSetup setup_;
  std::unique_ptr<MetricsFanout> sinks_;
  std::function<double()> clock_;
  EtaEstimator eta_;
  MixTracker mix_;
  std::string attention_branch_;  // the branch of the last step that ran segment attention
  int64_t attention_step_ = -1;   // the last step counted, and its share of windows (-1: none)
  double attention_share_ = -1;
};

}  // namespace loom
