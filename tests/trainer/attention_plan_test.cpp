// attention_select.h's claim that the memory plan, `loom-train plan` and the run name the same
// attention kernel: the plan's inputs (plan_inputs, which both the run's plan_for_run and
// `loom-train plan` take) hold what the one rule, choose_attention, gives the run, on made-up
// devices and every job.attention and job.deterministic.
#include <catch2/catch.hpp>

#include <vector>

#include "attention_select.h"
#include "attention_caps_fixture.h"
#include "config.h"
#include "plan_command.h"

TEST_CASE("the memory plan holds the attention kernel the run chooses", "[plan][attention]") {
  const loom::test::MadeUpDevices made_up;
  const loom::AttentionCaps &hopper = made_up.hopper, &ampere = made_up.ampere, &no_cudnn = made_up.no_cudnn;
  const loom::AttentionCaps cpu = loom::probe_attention_caps(torch::kCPU, 8);
  int compared = 0;
  const std::vector<const loom::AttentionCaps*> devices = {&hopper, &ampere, &no_cudnn, &cpu};
  for (const loom::AttentionCaps* caps : devices) {
    for (const torch::Dtype dtype : {torch::kBFloat16, torch::kFloat32}) {
      for (const char* attention : {"auto", "flash", "masked"}) {
        for (const bool deterministic : {false, true}) {
          loom::TrainConfig c;
          c.job.device = caps->cuda ? "cuda" : "cpu";
          c.job.attention = attention;
          c.job.deterministic = deterministic;
          c.model.dtype = dtype;
          c.model.hidden_size = 1024;
          c.model.num_attention_heads = 8;  // head dim 128
          INFO("cuda " << caps->cuda << ", hopper " << caps->hopper << ", cudnn " << caps->cudnn << ", " << dtype
                       << ", job.attention=" << attention << ", deterministic " << deterministic);
          loom::AttentionKernel run;
          try {
            run = loom::choose_attention(*caps, dtype, c.model.head_dim(), loom::parse_attention_kernel(attention),
                                         deterministic)
                      .kernel;
          } catch (const loom::Error&) {
            // A kernel that cannot run here is refused by the plan as by the run.
            CHECK_THROWS_AS(loom::plan_inputs(c, 1, uint64_t{80} << 30, *caps), loom::Error);
            continue;
          }
          CHECK(loom::plan_inputs(c, 1, uint64_t{80} << 30, *caps).attention == run);
          ++compared;
        }
      }
    }
  }
  CHECK(compared >= 30);  // most combinations run somewhere
}
