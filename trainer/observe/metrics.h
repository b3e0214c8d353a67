// Per-step metrics: one JSON object per line in JOB.run_dir/metrics.jsonl and the same figures as
// one greppable log line "metrics step=N loss=... lr=...". Names follow InternLM's where it has one
// (docs/TRAIN.md lists them all). On resume, lines with a step beyond the checkpoint are dropped.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/sys.h"

namespace loom {

// Ordered (name, value) pairs; integers print without a fraction.
using MetricFields = std::vector<std::pair<std::string, double>>;

std::string metrics_json_line(const MetricFields& f);
std::string metrics_log_line(const MetricFields& f);

class MetricsLog {
 public:
  // keep_through_step < 0: start a new file.
  MetricsLog(const std::string& path, int64_t keep_through_step);
  void write(const MetricFields& f);  // appends the JSON line (fields must start with "step")
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  sys::File file_;
};

}  // namespace loom
