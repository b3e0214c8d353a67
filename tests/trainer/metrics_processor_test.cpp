// The loop's metrics processor (trainer/loop/metrics_processor.h): the ETA with validation
// counted (eta.h), the data-mix line only when the mix moved, the rates and MFU of a record
// against hand-computed values, and the training progress line without an ETA of its own.
#include <catch2/catch.hpp>

#include <cmath>

#include "eta.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "metrics_processor.h"

using namespace loom;

namespace {

EtaOptions eta_options() {
  EtaOptions o;
  o.total_steps = 100;
  o.valid_every = 20;
  o.validates = true;
  o.micro_num = 2;
  o.validation_micro_batches = 6;
  return o;
}

// Keeps every record it is handed.
struct Recorder : MetricsSink {
  std::vector<MetricFields>* out;
  explicit Recorder(std::vector<MetricFields>* o) : out(o) {}
  void write(const MetricFields& f) override { out->push_back(f); }
};

double value(const MetricFields& f, const std::string& name) {
  for (const auto& [k, v] : f)
    if (k == name) return v;
  return NAN;
}

}  // namespace

TEST_CASE("ETA: the steps left at the training pace plus the validations left at theirs", "[metrics]") {
  EtaEstimator e(eta_options());
  CHECK(e.eta(10) < 0);  // no record yet
  // Validations left from a step: the multiples of 20 from it up to 80, then the final one.
  CHECK(e.validations_left(0) == 5);
  CHECK(e.validations_left(20) == 5);  // a record comes before its step's validation
  CHECK(e.validations_left(21) == 4);
  CHECK(e.validations_left(80) == 2);
  CHECK(e.validations_left(99) == 1);
  CHECK(e.validations_left(100) == 0);

  // The first record: its own step time; a validation of 6 forward micro-batches estimated at a
  // third of a training micro-batch each: 1.2 / 2 * 6 / 3 = 1.2 s.
  e.on_record(10, 100.0, 1.2);
  CHECK(e.per_validation() == Approx(1.2));
  CHECK(e.eta(10) == Approx(1.2 * 90 + 5 * 1.2));
  e.on_record(20, 112.0, 1.2);
  CHECK(e.per_step() == Approx(1.2));
  CHECK(e.eta(20) == Approx(1.2 * 80 + 5 * 1.2));
  // The validation at step 20 takes 30 s: the pace of the steps stays 1.2 s, and the three
  // periodic validations left and the final one are counted at 30 s each.
  e.on_validation(30.0);
  e.on_record(30, 112.0 + 30.0 + 12.0, 1.2);
  CHECK(e.per_step() == Approx(1.2));
  CHECK(e.eta(30) == Approx(1.2 * 70 + 4 * 30.0));
  // A mean over the whole wall time (the old estimate) would have said 54 / 20 * 70 = 189 s; the
  // time left is 84 s of steps and 120 s of validation.
  CHECK(e.eta(30) == Approx(204.0));
  CHECK(e.eta(100) < 0);  // the last step: nothing left

  EtaOptions none = eta_options();
  none.validates = false;
  EtaEstimator n(none);
  n.on_record(50, 0.0, 2.0);
  CHECK(n.validations_left(50) == 0);
  CHECK(n.eta(50) == Approx(100.0));
}

TEST_CASE("the data-mix line: at the first metrics line, then only when a share moved by a point", "[metrics]") {
  MixTracker m({"web", "code"});
  m.add(1, {9, 3});
  CHECK(m.take_line(1) == "data mix step 1: web 75.0% code 25.0%");
  m.add(2, {9, 3});
  CHECK(m.take_line(2).empty());  // unchanged
  m.add(3, {6, 6});
  CHECK(m.take_line(3) == "data mix step 3: web 50.0% code 50.0%");
  m.add(4, {12, 0});
  m.add(5, {0, 12});
  CHECK(m.take_line(5).empty());  // the window of steps 4-5 is 50/50 again
  m.add(6, {61, 39});
  CHECK(m.take_line(6) == "data mix step 6: web 61.0% code 39.0%");
  m.add(7, {615, 385});
  m.add(8, {615, 385});
  CHECK(m.take_line(8).empty());  // 61.5%: half a point
  m.add(9, {62, 38});
  m.add(10, {62, 38});
  CHECK(m.take_line(10) == "data mix steps 9-10: web 62.0% code 38.0%");

  MixTracker one({"all"});
  one.add(1, {12});
  CHECK(one.take_line(1).empty());  // one dataset: nothing to say
}

TEST_CASE("metrics processor: a record's rates and MFU, the ETA from its records and validations", "[metrics]") {
  log::set_level(log::Level::kWarn);
  std::vector<MetricFields> got;
  auto sinks = std::make_unique<MetricsFanout>();
  sinks->add(std::make_unique<Recorder>(&got));
  MetricsSetup s;
  s.total_steps = 10;
  s.world = 2;
  s.tokens_per_device = 1000;
  s.flops_per_token = 6e6;
  s.peak_tflops = 0.5;
  s.attention_branches = true;
  s.dataset_names = {"web", "code"};
  s.eta.total_steps = 10;
  double now = 0;
  MetricsProcessor p(s, std::move(sinks), [&] { return now; });
  auto step = [](int64_t n) {
    StepFigures f;
    f.fields = {{"step", static_cast<double>(n)}, {"loss", 2.0}};
    f.step_time = 0.5;
    f.real_tokens = 1800;
    f.executed_flops = 1.2e10;
    f.ds_loss = {3.0, 0}, f.ds_tokens = {2, 0}, f.ds_correct = {1, 0};
    return f;
  };
  p.count(1, {3, 1}, 4, 0);
  CHECK(got.empty());  // counting writes nothing
  now = 1.0;
  p.count(2, {3, 1}, 3, 1);
  p.on_step(step(2));
  REQUIRE(got.size() == 1);
  const MetricFields& f = got[0];
  CHECK(value(f, "step") == 2);
  CHECK(value(f, "tokens_per_s") == Approx(3600));      // 1,800 tokens / 0.5 s
  CHECK(value(f, "tgs") == Approx(1800));               // per device of 2
  CHECK(value(f, "tflops") == Approx(0.012));           // 6e6 * 1,000 / 0.5 / 1e12
  CHECK(value(f, "mfu") == Approx(0.024));              // of 0.5 TFLOP/s
  CHECK(value(f, "hardware_tflops") == Approx(0.012));  // 1.2e10 / 2 / 0.5 / 1e12
  CHECK(value(f, "hfu") == Approx(0.024));
  CHECK(value(f, "attention_windows_share") == Approx(0.25));  // step 2's calls: 1 of 4
  CHECK(value(f, "loss/web") == Approx(1.5));
  CHECK(value(f, "plex/web") == Approx(std::exp(1.5)));
  CHECK(std::isnan(value(f, "loss/code")));  // no token of code this step: no field
  CHECK(p.eta(2) == Approx(0.5 * 8));         // from the first record's step time
  // The next record one step and 3 s later, 2 s of which a validation took.
  p.on_validation({{"step", 2}, {"val/web_loss", 1.0}}, 2.0);
  REQUIRE(got.size() == 2);
  now = 4.0;
  p.count(3, {3, 1}, 4, 0);
  p.on_step(step(3));
  REQUIRE(got.size() == 3);
  CHECK(value(got[2], "step") == 3);
  CHECK(value(got[2], "attention_windows_share") == 0);
  CHECK(p.eta(3) == Approx(1.0 * 7));  // a step per second once the validation is taken out
}

TEST_CASE("the training progress line leaves the ETA to the metrics line", "[metrics]") {
  Progress p("train", 10, "steps", 1e9);
  p.set(3);
  CHECK(p.line().find("ETA") != std::string::npos);  // a progress line's own estimate
  p.show_eta(false);
  CHECK(p.line().find("ETA") == std::string::npos);
  CHECK(p.line().find("3/10 steps") != std::string::npos);
}
