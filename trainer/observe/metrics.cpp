#include "metrics.h"

#include <cmath>
#include <sstream>

#include "loom/error.h"
#include "loom/json_text.h"
#include "loom/log.h"
#include "loom/progress.h"

namespace loom {

namespace {
std::string number(double v) {
  if (std::isnan(v)) return "NaN";  // not JSON, but what Python's json module reads and writes
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return json_number(v);  // reads back as the same double: resume tests compare losses bit for bit
}

const double* find(const MetricFields& f, const std::string& name) {
  for (const auto& [k, v] : f)
    if (k == name) return &v;
  return nullptr;
}
}  // namespace

std::string metrics_json_line(const MetricFields& f) {
  std::string s = "{";
  for (size_t i = 0; i < f.size(); ++i) s += (i ? ", \"" : "\"") + f[i].first + "\": " + number(f[i].second);
  return s + "}\n";
}

std::string metrics_log_line(const MetricFields& f, int64_t total_steps, double eta_s) {
  LOOM_ASSERT(!f.empty() && f.front().first == "step", "metrics: the first field must be step");
  const std::string step = format_count(static_cast<int64_t>(f.front().second));
  std::string s;
  auto add = [&](const char* label, const std::string& text) { s += std::string(" ") + label + " " + text; };
  if (!find(f, "loss")) {  // validation: per set, loss, accuracy, perplexity
    s = "validation at step " + step + ":";
    for (const auto& [k, v] : f) {
      if (k.rfind("val/", 0) != 0) continue;
      const std::string name = k.substr(4);
      const size_t cut = name.rfind('_');
      const std::string set = name.substr(0, cut), what = name.substr(cut + 1);
      if (what == "loss") s += " " + set;
      add(what == "plex" ? "ppl" : what.c_str(), format_number(v));
    }
    return s;
  }
  s = "step " + step + "/" + format_count(total_steps);
  auto field = [&](const char* label, const char* name, int digits = 4) {
    if (const double* v = find(f, name)) add(label, format_number(*v, digits));
  };
  field("loss", "loss");
  field("lr", "lr", 3);
  field("grad_norm", "grad_norm", 3);
  field("tgs", "tgs", 3);
  const double* tps = find(f, "tokens_per_s");
  const double* tgs = find(f, "tgs");
  if (tps && tgs && *tps != *tgs) add("tokens/s", format_number(*tps, 3));  // several ranks
  if (const double* mfu = find(f, "mfu")) add("mfu", format_percent(*mfu, 1.0));
  if (const double* mb = find(f, "peak_memory_mb")) add("mem", format_number(*mb, 3) + " MiB");
  field("micro_num", "micro_num");
  if (const double* t = find(f, "step_time")) add("step_time", format_number(*t, 3) + "s");
  if (const double* skipped = find(f, "skipped_this_step"); skipped && *skipped != 0) s += " (update skipped)";
  if (eta_s >= 0) add("eta", format_duration(eta_s));
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
