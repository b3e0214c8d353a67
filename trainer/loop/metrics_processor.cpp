#include "metrics_processor.h"

#include <chrono>
#include <cmath>

#include "dataset.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"

namespace loom {

void MixTracker::add(int64_t step, const std::vector<uint64_t>& counts) {
  LOOM_ASSERT(counts.size() == names_.size(), counts.size(), " counts for ", names_.size(), " datasets");
  if (first_step_ < 0) {
    counts_.assign(names_.size(), 0);
    first_step_ = step;
  }
  for (size_t d = 0; d < counts.size(); ++d) counts_[d] += counts[d];
}

std::string MixTracker::take_line(int64_t step) {
  if (first_step_ < 0) return "";
  const int64_t first = first_step_;
  first_step_ = -1;
  if (names_.size() < 2) return "";
  uint64_t total = 0;
  for (uint64_t c : counts_) total += c;
  std::vector<double> shares;
  for (uint64_t c : counts_) shares.push_back(total ? 100.0 * static_cast<double>(c) / static_cast<double>(total) : 0);
  bool moved = printed_.empty();
  for (size_t d = 0; d < shares.size() && !moved; ++d) moved = std::fabs(shares[d] - printed_[d]) >= kMixChangePoints;
  if (!moved) return "";
  printed_ = shares;
  return mixture_line(first, step, names_, counts_);
}

MetricsProcessor::MetricsProcessor(MetricsSetup setup, std::unique_ptr<MetricsFanout> sinks,
                                   std::function<double()> clock)
    : setup_(std::move(setup)),
      sinks_(std::move(sinks)),
      clock_(std::move(clock)),
      eta_(setup_.eta),
      mix_(setup_.dataset_names) {
  if (!clock_)
    clock_ = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
}

// tokens/s, TFLOP/s and their shares of the peak: a rate is a step's work over its wall time.
void MetricsProcessor::add_rates(StepFigures& s) const {
  const double t = s.step_time > 0 ? s.step_time : 1e-9, w = setup_.world;
  const double tflops = setup_.flops_per_token * setup_.tokens_per_device / t / 1e12;  // per device, model FLOPs
  const double hardware_tflops = s.executed_flops / w / t / 1e12;                      // per device, executed FLOPs
  MetricFields& f = s.fields;
  f.emplace_back("tokens_per_s", s.real_tokens / t);  // all ranks
  f.emplace_back("tgs", s.real_tokens / t / w);       // per device (one device per rank)
  f.emplace_back("tflops", tflops);
  f.emplace_back("hardware_tflops", hardware_tflops);
  if (setup_.peak_tflops > 0) {  // none at all where the peak is not known (startup.h)
    f.emplace_back("mfu", tflops / setup_.peak_tflops);
    f.emplace_back("hfu", hardware_tflops / setup_.peak_tflops);
  }
  for (size_t d = 0; d < setup_.dataset_names.size() && d < s.ds_tokens.size(); ++d) {
    if (s.ds_tokens[d] == 0) continue;
    const double dl = s.ds_loss[d] / s.ds_tokens[d];
    f.emplace_back("loss/" + setup_.dataset_names[d], dl);
    f.emplace_back("acc/" + setup_.dataset_names[d], s.ds_correct[d] / s.ds_tokens[d]);
    f.emplace_back("plex/" + setup_.dataset_names[d], std::exp(dl));
  }
}

void MetricsProcessor::count(int64_t step, const std::vector<uint64_t>& mix, int64_t per_document, int64_t windows) {
  if (!mix.empty()) mix_.add(step, mix);
  attention_step_ = step;
  attention_share_ = -1;
  if (!setup_.attention_branches || per_document + windows == 0) return;
  attention_share_ = double(windows) / double(per_document + windows);
  const double share = attention_share_;
  const char* branch = share == 0   ? "cuDNN, a sequence per document"
                       : share == 1 ? "cuDNN, short documents sharing windows"
                                    : "cuDNN, a sequence per document and windows";
  if (branch != attention_branch_)
    log::info("attention: from step ", step, " ", branch, " (rank 0's micro-batches; attention_windows_share ",
              format_number(share, 3), ")");
  attention_branch_ = branch;
}

void MetricsProcessor::on_step(StepFigures s) {
  LOOM_ASSERT(!s.fields.empty() && s.fields.front().first == "step", "metrics: the first field must be step");
  const int64_t step = static_cast<int64_t>(s.fields.front().second);
  add_rates(s);
  if (attention_step_ == step && attention_share_ >= 0) s.fields.emplace_back("attention_windows_share", attention_share_);
  eta_.on_record(step, clock_(), s.step_time);
  write(s.fields);
  const std::string mix = mix_.take_line(step);
  if (!mix.empty()) log::info(mix);
}

void MetricsProcessor::on_validation(const MetricFields& fields, double seconds) {
  eta_.on_validation(seconds);
  write(fields);
}

void MetricsProcessor::write(const MetricFields& f) {
  sinks_->write(f);
  bool training = false;  // a validation record has no loss, and no ETA on its line
  for (const auto& field : f) training = training || field.first == "loss";
  log::info(metrics_log_line(f, setup_.total_steps, training ? eta(static_cast<int64_t>(f.front().second)) : -1));
}

}  // namespace loom
