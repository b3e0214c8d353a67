// Per-step metrics, written from one record to every sink: one JSON object per line in
// JOB.run_dir/metrics.jsonl, the same figures as one greppable log line "metrics step=N loss=...
// lr=...", and TensorBoard scalars. Names follow InternLM's where it has one (docs/TRAIN.md lists
// them all). On resume, lines with a step beyond the checkpoint are dropped.
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
std::string metrics_log_line(const MetricFields& f);

// Where a record goes. The loop writes each record once, to a MetricsFanout.
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

// The "metrics step=N ..." log line (info level).
class LogLineSink : public MetricsSink {
 public:
  void write(const MetricFields& f) override;
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
