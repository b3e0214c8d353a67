#define LOOM_COMPAT_PROFILER
#include "profiling.h"

#include <ATen/record_function.h>

#include <cstdio>
#include <set>
#include <unordered_map>

#include "loom/json_text.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "torch_compat.h"

namespace loom {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

ProfileRange::ProfileRange(const std::string& name) {
  if (!at::hasCallbacks()) return;  // nothing observes: no allocation
  auto rf = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (!rf->isActive()) return;
  rf->before(name);  // copies the name
  rf_ = std::move(rf);
}

ProfileRange::~ProfileRange() = default;

void ProfileRange::end() { rf_.reset(); }  // ~RecordFunction runs the end callbacks

Profiler::Profiler(bool enabled, std::string trace_path) : enabled_(enabled), path_(std::move(trace_path)) {}

Profiler::~Profiler() {
  try {
    finish();
  } catch (const std::exception& e) {
    log::warn("profiler: ", e.what());
  }
}

void Profiler::start() {
  try {
    kineto_ = compat::kProfilerKineto;
    if (kineto_) {
      std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
      if (torch::cuda::is_available()) activities.insert(impl::ActivityType::CUDA);
      impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/true);
      prof::prepareProfiler(config, activities);
      prof::enableProfiler(config, activities);
    } else {
      prof::enableProfilerLegacy(impl::ProfilerConfig(impl::ProfilerState::CPU, /*report_input_shapes=*/true));
    }
    active_ = true;
    log::info("profiler: recording steps ", kFirst, "..", kFirst + kSteps - 1, " (",
              kineto_ ? "Kineto" : "legacy autograd profiler, CPU", ")");
  } catch (const std::exception& e) {
    const auto* ce = dynamic_cast<const c10::Error*>(&e);
    log::warn("profiler: this LibTorch cannot profile (", ce ? ce->what_without_backtrace() : e.what(),
              "); --profiling ignored");
    enabled_ = false;
  }
}

void Profiler::on_step_begin(int64_t i) {
  if (!enabled_) return;
  if (i == kFirst) start();
  if (!active_) return;
  if (i == kFirst + kSteps) return finish();
  step_range_.reset();  // ends the previous step's range first
  step_range_ = std::make_unique<ProfileRange>("ProfilerStep#" + std::to_string(i));
}

void Profiler::finish() {
  if (!active_) return;
  active_ = false;
  enabled_ = false;
  step_range_.reset();
  try {
    write_trace();
  } catch (const std::exception& e) {
    const auto* ce = dynamic_cast<const c10::Error*>(&e);
    log::warn("profiler: no trace written (", ce ? ce->what_without_backtrace() : e.what(), ")");
  }
}

namespace {

// The legacy profiler's per-thread push/pop events, paired by RecordFunction handle, as chrome
// trace complete ("X") events; times in microseconds from the first event. Categories as Kineto's:
// user ranges (RecordScope::USER_SCOPE, the scope every push event records), else operators.
std::string legacy_trace_json(const prof::thread_event_lists& lists, size_t* n_events) {
  std::unordered_map<at::RecordFunctionHandle, const prof::LegacyEvent*> open;
  double t0 = 0;
  bool have_t0 = false;
  for (const auto& list : lists)
    for (const auto& e : list)
      if (e.kind() == prof::EventKind::PushRange) {
        open[e.handle()] = &e;
        if (!have_t0 || e.cpuUs() < t0) t0 = e.cpuUs(), have_t0 = true;
      }
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
  size_t n = 0;
  char num[64];
  for (const auto& list : lists)
    for (const auto& pop : list) {
      if (pop.kind() != prof::EventKind::PopRange) continue;
      const auto it = open.find(pop.handle());
      if (it == open.end()) continue;
      const prof::LegacyEvent& push = *it->second;
      const std::string name = push.name();
      out += n++ ? ",\n" : "\n";
      out += "{\"ph\": \"X\", \"cat\": ";
      const bool user = push.scope() == static_cast<uint8_t>(at::RecordScope::USER_SCOPE);
      out += user ? "\"user_annotation\"" : "\"cpu_op\"";
      out += ", \"name\": " + json_quote(name);
      std::snprintf(num, sizeof num, ", \"pid\": 0, \"tid\": %llu",
                    static_cast<unsigned long long>(push.threadId()));
      out += num;
      std::snprintf(num, sizeof num, ", \"ts\": %.3f, \"dur\": %.3f", push.cpuUs() - t0, push.cpuElapsedUs(pop));
      out += num;
      const auto shapes = push.shapes();
      if (!shapes.empty()) {
        out += ", \"args\": {\"Input Dims\": [";
        for (size_t i = 0; i < shapes.size(); ++i) {
          out += i ? ", [" : "[";
          for (size_t j = 0; j < shapes[i].size(); ++j) out += (j ? ", " : "") + std::to_string(shapes[i][j]);
          out += "]";
        }
        out += "]}";
      }
      out += "}";
      open.erase(it);
    }
  *n_events = n;
  return out + "\n]}\n";
}

}  // namespace

void Profiler::write_trace() {
  if (kineto_) {
    std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
    // Kineto's own writer; it is a diagnostic trace, not written atomically.
    result->save(path_);
    log::info("profiler: ", result->events().size(), " events, chrome trace in ", path_);
    return;
  }
  const prof::thread_event_lists lists = prof::disableProfilerLegacy();
  size_t n = 0;
  const std::string json = legacy_trace_json(lists, &n);
  sys::AtomicFile out(path_);
  out.write(json);
  out.commit();
  log::info("profiler: ", n, " events, chrome trace in ", path_);
}

}  // namespace loom
