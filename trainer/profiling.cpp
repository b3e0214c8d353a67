#include "profiling.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include "loom/log.h"

namespace loom {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

Profiler::Profiler(bool enabled, std::string trace_path) : enabled_(enabled), path_(std::move(trace_path)) {}

Profiler::~Profiler() {
  try {
    finish();
  } catch (const std::exception& e) {
    log::warn("profiler: ", e.what());
  }
}

void Profiler::on_step_begin(int64_t i) {
  if (!enabled_) return;
  if (i == kFirst) {
    try {
      impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/true);
      std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
      prof::prepareProfiler(config, activities);
      prof::enableProfiler(config, activities);
      active_ = true;
      log::info("profiler: recording steps ", kFirst, "..", kFirst + kSteps - 1);
    } catch (const c10::Error& e) {
      log::warn("profiler: this LibTorch cannot profile (", e.what_without_backtrace(), "); --profiling ignored");
      enabled_ = false;
    }
  } else if (i == kFirst + kSteps) {
    finish();
  }
}

void Profiler::finish() {
  if (!active_) return;
  active_ = false;
  enabled_ = false;
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  // ProfilerResult::save writes the file itself (Kineto's own writer); it is a diagnostic trace.
  result->save(path_);
  log::info("profiler: ", result->events().size(), " events, chrome trace in ", path_);
}

}  // namespace loom
