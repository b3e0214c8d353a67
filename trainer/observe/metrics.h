// Per-step metrics, written from one record to every sink: every field as one JSON object per line
// in JOB.run_dir/metrics.jsonl (numbers as the shortest text that reads back as the same double)
// and as TensorBoard scalars; a short line for people in the log:
//
//   step 12/100 loss 3.412 lr 0.0001 grad_norm 1.234 tgs 1,234 mfu 12.3% mem 123 MiB micro_num 2 eta 3m05s
//
// Names follow InternLM's where it has one (tgs, micro_num; docs/TRAIN.md lists them all). On
// resume, lines with a step beyond the checkpoint are dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/sys.h"
#include "tensorboard.h"

namespace loom {

// One record: ordered (name, value) pairs, "step" first; integers print without a fraction.
using MetricFields = std::vector<std::pair<std::string, double>>;

std::string metrics_json_line(const MetricFields& f);
// The log line above (a validation record: "validation at step N: SET loss L acc A ppl P ...").
// eta_s < 0: no ETA. The run's one ETA is the metrics processor's (loop/metrics_processor.h).
std::string metrics_log_line(const MetricFields& f, int64_t total_steps, double eta_s);

// Where a record goes. The loop's metrics processor writes each record once, to a MetricsFanout,
// and logs the line itself.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void write(const MetricFields& f) = 0;  // f starts with "step"
};

// metrics.jsonl.
class JsonlSink : public MetricsSink {
 public:
  // keep_through_step < 0: start a new file.
  JsonlSink(const std::string& path, int64_t keep_through_step);
  void write(const MetricFields& f) override;  // appends the JSON line
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  sys::File file_;
};

// TensorBoard scalars: every field but "step", at that step.
class TensorBoardSink : public MetricsSink {
 public:
  TensorBoardSink(const std::string& dir, int64_t keep_through_step) : writer_(dir, keep_through_step) {}
  void write(const MetricFields& f) override;

 private:
  TensorBoardWriter writer_;
};

// Every added sink, in the order added.
class MetricsFanout : public MetricsSink {
 public:
  void add(std::unique_ptr<MetricsSink> sink) { sinks_.push_back(std::move(sink)); }
  void write(const MetricFields& f) override;

 private:
  std::vector<std::unique_ptr<MetricsSink>> sinks_;
};

}  // namespace loom
