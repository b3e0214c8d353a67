#include "metrics.h"

#include <cmath>
#include <sstream>

#include "loom/error.h"
#include "loom/log.h"

namespace loom {

namespace {
std::string number(double v) {
  if (std::isnan(v)) return "NaN";  // not JSON, but what Python's json module reads and writes
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os.precision(17);  // round-trips a double: resume tests compare losses bit for bit
  os << v;
  return os.str();
}
}  // namespace

std::string metrics_json_line(const MetricFields& f) {
  std::string s = "{";
  for (size_t i = 0; i < f.size(); ++i) s += (i ? ", \"" : "\"") + f[i].first + "\": " + number(f[i].second);
  return s + "}\n";
}

std::string metrics_log_line(const MetricFields& f) {
  std::string s = "metrics";
  for (const auto& [k, v] : f) s += " " + k + "=" + number(v);
  return s;
}

JsonlSink::JsonlSink(const std::string& path, int64_t keep_through_step) : path_(path) {
  sys::make_dirs(sys::dirname(path));
  std::string kept;
  if (keep_through_step >= 0 && sys::exists(path)) {
    std::istringstream in(sys::read_file(path));
    std::string line;
    while (std::getline(in, line)) {
      // "{"step": N, ...": the step is the first field by construction; a torn last line is dropped.
      const std::string prefix = "{\"step\": ";
      if (line.rfind(prefix, 0) != 0 || line.back() != '}') continue;
      const int64_t step = std::strtoll(line.c_str() + prefix.size(), nullptr, 10);
      if (step <= keep_through_step) kept += line + "\n";
    }
  }
  // Appended line by line as the run goes (a live log, not an AtomicFile output).
  file_ = sys::File::create(path);
  file_.write_all(kept.data(), kept.size());
}

void JsonlSink::write(const MetricFields& f) {
  LOOM_ASSERT(!f.empty() && f.front().first == "step", "metrics: the first field must be step");
  const std::string line = metrics_json_line(f);
  file_.write_all(line.data(), line.size());
}

void LogLineSink::write(const MetricFields& f) { log::info(metrics_log_line(f)); }

void TensorBoardSink::write(const MetricFields& f) {
  LOOM_ASSERT(!f.empty() && f.front().first == "step", "metrics: the first field must be step");
  std::vector<std::pair<std::string, float>> scalars;
  for (size_t i = 1; i < f.size(); ++i) scalars.emplace_back(f[i].first, static_cast<float>(f[i].second));
  writer_.add_scalars(static_cast<int64_t>(f.front().second), scalars);
}

void MetricsFanout::write(const MetricFields& f) {
  for (const auto& sink : sinks_) sink->write(f);
}

}  // namespace loom
