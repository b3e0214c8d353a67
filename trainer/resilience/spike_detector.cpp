#include "spike_detector.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "loom/error.h"
#include "loom/json_text.h"

namespace loom {

SpikeDetector::SpikeDetector(SpikeOptions o) : o_(o) {
  LOOM_CHECK(o_.ratio == 0 || o_.ratio > 1, "monitor.spike_ratio must be 0 (off) or > 1, got ", o_.ratio);
  LOOM_CHECK(o_.window >= 1, "monitor.spike_window must be >= 1, got ", o_.window);
}

double SpikeDetector::reference() const {
  if (static_cast<int64_t>(losses_.size()) < o_.window) return 0;
  std::vector<double> v(losses_.begin(), losses_.end());
  const size_t n = v.size(), mid = n / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (n % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return lo + (hi - lo) / 2;  // no overflow, exact for equal values
}

SpikeVerdict SpikeDetector::observe(int64_t step, double loss) {
  SpikeVerdict v;
  v.reference = reference();
  v.warming_up = v.reference == 0 && static_cast<int64_t>(losses_.size()) < o_.window;
  if (!std::isfinite(loss)) {
    v.is_spike = true;
  } else if (!v.warming_up && v.reference > 0) {
    v.ratio = loss / v.reference;
    v.is_spike = enabled() && loss > o_.ratio * v.reference;
  }
  if (step <= last_step_) return v;  // a replayed step: judged, not learned from
  last_step_ = step;
  if (v.is_spike) {
    ++spikes_;
    if (++consecutive_ >= o_.window && std::isfinite(loss)) {
      losses_.clear();  // a new level, not a spike: warm up again from here
      consecutive_ = 0;
      v.rebased = true;
    }
  } else {
    consecutive_ = 0;
  }
  const bool accept = std::isfinite(loss) && (!v.is_spike || !o_.exclude_spikes);
  if (accept && !v.rebased) {
    losses_.push_back(loss);
    while (static_cast<int64_t>(losses_.size()) > o_.window) losses_.pop_front();
  }
  return v;
}

std::string SpikeDetector::to_json() const {
  std::string out = "{\"window\": " + std::to_string(o_.window) + ", \"last_step\": " + std::to_string(last_step_) +
                    ", \"consecutive\": " + std::to_string(consecutive_) + ", \"spikes\": " + std::to_string(spikes_) +
                    ", \"losses\": [";
  char buf[40];
  for (size_t i = 0; i < losses_.size(); ++i) {
    out += (i ? ", " : "");
    if (std::isfinite(losses_[i])) {
      out += json_number(losses_[i]);  // reads back as the same double
    } else {
      std::snprintf(buf, sizeof buf, "%g", losses_[i]);
      out += buf;
    }
  }
  return out + "]}";
}

void SpikeDetector::from_json(const std::string& text) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  auto err = parser.parse(padded).get(root);
  LOOM_CHECK(!err, "spike detector state: not valid JSON: ", simdjson::error_message(err));
  int64_t last_step = 0, consecutive = 0, spikes = 0;
  simdjson::dom::array losses;
  LOOM_CHECK(!root["last_step"].get(last_step) && !root["consecutive"].get(consecutive) &&
                 !root["spikes"].get(spikes) && !root["losses"].get(losses),
             "spike detector state: needs integers last_step, consecutive, spikes and an array losses: ", text);
  std::deque<double> restored;
  for (auto x : losses) {
    double d = 0;
    LOOM_CHECK(!x.get(d) && std::isfinite(d), "spike detector state: a loss is not a finite number: ", text);
    restored.push_back(d);
  }
  while (static_cast<int64_t>(restored.size()) > o_.window) restored.pop_front();
  losses_ = std::move(restored);
  last_step_ = last_step;
  consecutive_ = std::min(consecutive, o_.window - 1);
  spikes_ = spikes;
}

}  // namespace loom
