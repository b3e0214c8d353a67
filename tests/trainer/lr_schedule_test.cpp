#include <catch2/catch.hpp>

#include <cmath>

#include "loom/error.h"
#include "lr_schedule.h"

using namespace loom;

TEST_CASE("lr schedule follows InternLM's warmup and cosine closed form") {
  LrScheduleOptions o;
  o.base_lr = 1e-3;
  o.eta_min = 1e-5;
  o.total_steps = 100;
  o.warmup_ratio = 0.1;  // Wst = 10
  o.init_steps = 2;      // W = 12
  LrSchedule s(o);
  CHECK(s.warmup_end() == 12);
  CHECK(s.lr(0) == 0.0);
  CHECK(s.lr(1) == 0.0);
  CHECK(s.lr(2) == Approx(1e-4).epsilon(1e-15));   // (2+1-2)/10
  CHECK(s.lr(11) == Approx(1e-3).epsilon(1e-15));  // (11+1-2)/10
  CHECK(s.lr(12) == Approx(1e-3).epsilon(1e-15));  // cos(0)
  // Halfway through the cosine (e - W = 44 of 88): the midpoint of base and eta_min.
  CHECK(s.lr(56) == Approx((1e-3 + 1e-5) / 2).epsilon(1e-12));
  CHECK(s.lr(34) == Approx(1e-5 + (1e-3 - 1e-5) * (1 + std::cos(M_PI * 22.0 / 88.0)) / 2).epsilon(1e-12));
  CHECK(s.lr(100) == 1e-5);
  CHECK(s.lr(1000) == 1e-5);
  // Monotone non-increasing after the warmup.
  for (int64_t e = 12; e < 100; ++e) CHECK(s.lr(e + 1) <= s.lr(e));
}

TEST_CASE("warmup_ratio truncates like Python int()") {
  LrScheduleOptions o;
  o.base_lr = 1.0;
  o.total_steps = 7;
  o.warmup_ratio = 0.3;  // int(2.1) = 2
  LrSchedule s(o);
  CHECK(s.warmup_end() == 2);
  CHECK(s.lr(0) == 0.5);
  CHECK(s.lr(1) == 1.0);
  CHECK(s.lr(2) == 1.0);
}

TEST_CASE("constant schedule keeps base after warmup") {
  LrScheduleOptions o;
  o.kind = "constant";
  o.base_lr = 0.25;
  o.total_steps = 10;
  o.warmup_ratio = 0.2;
  LrSchedule s(o);
  CHECK(s.lr(0) == 0.125);
  CHECK(s.lr(1) == 0.25);
  CHECK(s.lr(9) == 0.25);
  CHECK(s.lr(50) == 0.25);
}

TEST_CASE("lr schedule rejects bad options") {
  LrScheduleOptions o;
  o.kind = "linear";
  CHECK_THROWS_WITH(LrSchedule(o), Catch::Contains("lr_scheduler.kind must be cosine, constant or wsd, got 'linear'"));
  o.kind = "cosine";
  o.warmup_ratio = 1.5;
  CHECK_THROWS_WITH(LrSchedule(o), Catch::Contains("lr_scheduler.warmup_ratio must be in [0, 1)"));
}

TEST_CASE("wsd: warmup, base lr until the last decay_ratio of the run, then linear to eta_min") {
  LrScheduleOptions o;
  o.kind = "wsd";
  o.base_lr = 1e-3;
  o.eta_min = 1e-5;
  o.total_steps = 100;
  o.warmup_ratio = 0.1;  // W = 10
  o.decay_ratio = 0.2;   // decay over updates 80..99
  LrSchedule s(o);
  CHECK(s.lr(0) == Approx(1e-4).epsilon(1e-15));
  CHECK(s.lr(9) == Approx(1e-3).epsilon(1e-15));
  for (int64_t e = 10; e < 80; ++e) CHECK(s.lr(e) == 1e-3);
  CHECK(s.lr(80) == Approx(1e-3 + (1e-5 - 1e-3) * 1.0 / 20).epsilon(1e-15));
  CHECK(s.lr(89) == Approx(1e-3 + (1e-5 - 1e-3) * 10.0 / 20).epsilon(1e-15));
  CHECK(s.lr(99) == Approx(1e-5).epsilon(1e-12));
  CHECK(s.lr(100) == 1e-5);
  // Extended before its decay begins (say at update 70), the run goes on at the base lr until the
  // new decay: only the warmup, long past, differs (it is int(total_steps * warmup_ratio)).
  LrScheduleOptions longer = o;
  longer.total_steps = 150;
  LrSchedule l(longer);
  for (int64_t e = 15; e < 120; ++e) CHECK(l.lr(e) == 1e-3);
  CHECK(l.lr(149) == Approx(1e-5).epsilon(1e-12));
  CHECK(o.differences(longer) == "data.total_steps: 100 -> 150");
  CHECK(o.differences(o).empty());
  longer.decay_ratio = 0.5;
  CHECK(o.differences(longer) == "data.total_steps: 100 -> 150; lr_scheduler.decay_ratio: 0.2 -> 0.5");
  o.decay_ratio = 0;
  CHECK_THROWS_WITH(LrSchedule(o), Catch::Contains("lr_scheduler.decay_ratio must be in (0, 1]"));
}

TEST_CASE("lr schedule: warmup_steps overrides int(total_steps * warmup_ratio)") {
  LrScheduleOptions o;
  o.base_lr = 1.0;
  o.total_steps = 100;
  o.warmup_ratio = 0.5;  // would be 50
  o.warmup_steps = 4;
  o.init_steps = 1;
  LrSchedule s(o);
  CHECK(s.warmup_end() == 5);
  CHECK(s.lr(0) == 0.0);
  CHECK(s.lr(1) == 0.25);
  CHECK(s.lr(4) == 1.0);
  CHECK(s.lr(5) == 1.0);  // cos(0) at W
  o.warmup_steps = 0;     // no warmup at all, whatever the ratio
  CHECK(LrSchedule(o).warmup_end() == 1);
  CHECK(LrSchedule(o).lr(1) == 1.0);
  o.warmup_steps = -1;
  CHECK(LrSchedule(o).warmup_end() == 51);
  o.warmup_steps = 100;
  CHECK_THROWS_WITH(LrSchedule(o), Catch::Contains("lr_scheduler.warmup_steps must be -1 (use warmup_ratio) or in [0, "
                                                   "data.total_steps), got 100"));
  LrScheduleOptions a, b;
  b.warmup_steps = 7;
  CHECK(a.differences(b) == "lr_scheduler.warmup_steps: -1 -> 7");
}
