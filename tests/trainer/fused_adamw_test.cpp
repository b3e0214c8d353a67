// adamw_step's reference path (CPU) against torch::optim::AdamW over several steps. Label unit.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "fused_adamw.h"

TEST_CASE("adamw_step equals torch optim AdamW over five steps with weight decay") {
  torch::manual_seed(31);
  std::vector<torch::Tensor> ref{torch::randn({7, 5}), torch::randn({3})};
  std::vector<torch::Tensor> mine{ref[0].clone(), ref[1].clone()};
  for (auto& p : ref) p.requires_grad_(true);
  torch::optim::AdamW opt(ref, torch::optim::AdamWOptions(3e-2).betas({0.9, 0.95}).eps(1e-6).weight_decay(0.1));
  std::vector<torch::Tensor> m{torch::zeros({7, 5}), torch::zeros({3})}, v{torch::zeros({7, 5}), torch::zeros({3})};
  const torch::Tensor step = torch::zeros({}, torch::kFloat32);
  loom::OptimizerOptions o;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  o.weight_decay = 0.1;
  const loom::AdamWStepArgs args{3e-2};
  for (int i = 0; i < 5; ++i) {
    std::vector<torch::Tensor> g{torch::randn({7, 5}), torch::randn({3})};
    ref[0].mutable_grad() = g[0].clone();
    ref[1].mutable_grad() = g[1].clone();
    opt.step();
    step.add_(1);
    loom::adamw_step(mine, g, m, v, step, o, args);
    CHECK((mine[0] - ref[0].detach()).abs().max().item<double>() < 1e-6);
    CHECK((mine[1] - ref[1].detach()).abs().max().item<double>() < 1e-6);
  }
  // A set skip flag leaves everything untouched.
  const torch::Tensor before = mine[0].clone(), m_before = m[0].clone();
  loom::adamw_step(mine, {torch::ones({7, 5}), torch::ones({3})}, m, v, step, o, args, torch::ones({}));
  CHECK(torch::equal(mine[0], before));
  CHECK(torch::equal(m[0], m_before));
  CHECK_FALSE(loom::adamw_is_fused(torch::kCPU));
}

TEST_CASE("adamw_step casts gradients of another dtype as if they were given in the params dtype") {
  torch::manual_seed(32);
  const std::vector<torch::Tensor> g16{torch::randn({300}).to(torch::kBFloat16), torch::randn({4, 4}).to(torch::kBFloat16)};
  std::vector<torch::Tensor> a{torch::randn({300}), torch::randn({4, 4})};
  std::vector<torch::Tensor> b{a[0].clone(), a[1].clone()};
  std::vector<torch::Tensor> ma{torch::zeros({300}), torch::zeros({4, 4})}, va{torch::zeros({300}), torch::zeros({4, 4})};
  std::vector<torch::Tensor> mb{torch::zeros({300}), torch::zeros({4, 4})}, vb{torch::zeros({300}), torch::zeros({4, 4})};
  const torch::Tensor step = torch::ones({});
  loom::OptimizerOptions o;
  o.beta2 = 0.999;
  o.weight_decay = 0.1;
  const loom::AdamWStepArgs args{1e-3};
  loom::adamw_step(a, g16, ma, va, step, o, args);
  loom::adamw_step(b, {g16[0].to(torch::kFloat32), g16[1].to(torch::kFloat32)}, mb, vb, step, o, args);
  CHECK(torch::equal(a[0], b[0]));
  CHECK(torch::equal(a[1], b[1]));
  CHECK(torch::equal(va[1], vb[1]));
}
