// The fused AdamW kernel on CUDA against adamw_step's reference path on CPU. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <cmath>

#include <catch2/catch.hpp>

#include "fused_adamw.h"
#include "gpu_util.h"

TEST_CASE("fused AdamW on CUDA equals the reference step and honours the skip flag") {
  using loom::test::cuda;
  REQUIRE(loom::adamw_is_fused(cuda()));
  torch::manual_seed(41);
  const std::vector<int64_t> numels{1, 1000, 4097, 65536};
  std::vector<torch::Tensor> p_cpu, g_cpu, m_cpu, v_cpu, p_gpu, g_gpu, m_gpu, v_gpu;
  for (int64_t n : numels) {
    p_cpu.push_back(torch::randn({n}));
    m_cpu.push_back(torch::zeros({n}));
    v_cpu.push_back(torch::zeros({n}));
    p_gpu.push_back(p_cpu.back().to(cuda()));
    m_gpu.push_back(torch::zeros({n}, torch::device(cuda())));
    v_gpu.push_back(torch::zeros({n}, torch::device(cuda())));
  }
  loom::OptimizerOptions o;
  o.beta2 = 0.95;
  o.weight_decay = 0.1;
  const loom::AdamWStepArgs args{1e-2};
  const torch::Tensor step_cpu = torch::zeros({}), step_gpu = torch::zeros({}, torch::device(cuda()));
  for (int i = 0; i < 3; ++i) {
    g_cpu.clear();
    g_gpu.clear();
    for (int64_t n : numels) {
      g_cpu.push_back(torch::randn({n}));
      g_gpu.push_back(g_cpu.back().to(cuda()));
    }
    step_cpu.add_(1);
    step_gpu.add_(1);
    loom::adamw_step(p_cpu, g_cpu, m_cpu, v_cpu, step_cpu, o, args);
    loom::adamw_step(p_gpu, g_gpu, m_gpu, v_gpu, step_gpu, o, args, torch::zeros({}, torch::device(cuda())));
  }
  for (size_t j = 0; j < numels.size(); ++j) {
    CHECK((p_gpu[j].cpu() - p_cpu[j]).abs().max().item<double>() < 1e-5);
    CHECK((v_gpu[j].cpu() - v_cpu[j]).abs().max().item<double>() < 1e-6);
  }
  const torch::Tensor before = p_gpu[1].clone();
  loom::adamw_step(p_gpu, g_gpu, m_gpu, v_gpu, step_gpu, o, args, torch::ones({}, torch::device(cuda())));
  CHECK(torch::equal(p_gpu[1], before));
}

TEST_CASE("adamw_step with bf16 grads on CUDA (loom's kernel) equals ATen's step on the same grads in fp32") {
  using loom::test::cuda;
  torch::manual_seed(43);
  // 16384 * 3 + 5: several blocks and a ragged tail; the view at offset 1 is not 16-byte aligned.
  const std::vector<int64_t> numels{1, 3, 1000, 4097, 16384 * 3 + 5, 65536};
  const auto f32 = torch::TensorOptions().device(cuda());
  std::vector<torch::Tensor> p, m, v, low, p_ref, m_ref, v_ref;
  for (int64_t n : numels) {
    p.push_back(torch::randn({n}, f32));
    m.push_back(torch::zeros({n}, f32));
    v.push_back(torch::zeros({n}, f32));
    low.push_back(torch::empty({n}, f32.dtype(torch::kBFloat16)));
  }
  const torch::Tensor big = torch::randn({4098}, f32);
  p.push_back(big.narrow(0, 1, 4097));
  m.push_back(torch::zeros({4098}, f32).narrow(0, 1, 4097));
  v.push_back(torch::zeros({4097}, f32));
  low.push_back(torch::empty({4098}, f32.dtype(torch::kBFloat16)).narrow(0, 1, 4097));
  for (size_t j = 0; j < p.size(); ++j) {
    p_ref.push_back(p[j].clone());
    m_ref.push_back(m[j].clone());
    v_ref.push_back(v[j].clone());
  }
  loom::OptimizerOptions o;
  o.beta2 = 0.95;
  o.weight_decay = 0.1;
  const loom::AdamWStepArgs args{1e-2, /*decay=*/true, /*grad_scale=*/0.5};
  const loom::AdamWStepArgs args_ref{1e-2};
  const torch::Tensor step = torch::zeros({}, f32);
  std::vector<torch::Tensor> g;
  for (int i = 0; i < 3; ++i) {
    g.clear();
    std::vector<torch::Tensor> g_ref;
    for (const auto& t : p) {
      g.push_back(torch::randn(t.sizes(), f32).to(torch::kBFloat16));
      g_ref.push_back(g.back().to(torch::kFloat32) * 0.5);
    }
    const std::vector<torch::Tensor> g_before = {g[2].clone()};
    step.add_(1);
    loom::adamw_step(p, g, m, v, step, o, args, torch::zeros({}, f32), low);
    loom::adamw_step(p_ref, g_ref, m_ref, v_ref, step, o, args_ref);
    CHECK(torch::equal(g[2], g_before[0]));  // the gradients are read, not scaled in place
  }
  for (size_t j = 0; j < p.size(); ++j) {
    INFO("tensor " << j << " of " << p[j].numel());
    CHECK((p[j] - p_ref[j]).abs().max().item<double>() < 1e-5);
    CHECK((m[j] - m_ref[j]).abs().max().item<double>() < 1e-6);
    CHECK((v[j] - v_ref[j]).abs().max().item<double>() < 1e-6);
    CHECK(torch::equal(low[j], p[j].to(torch::kBFloat16)));
  }
  const torch::Tensor before = p[3].clone(), low_before = low[3].clone();
  loom::adamw_step(p, g, m, v, step, o, args, torch::ones({}, f32), low);
  CHECK(torch::equal(p[3], before));
  CHECK(torch::equal(low[3], low_before));
}

TEST_CASE("global_grad_norm equals the fp64 norm over bf16 and fp32 gradients") {
  using loom::test::cuda;
  torch::manual_seed(44);
  const auto opt = torch::TensorOptions().device(cuda());
  const std::vector<torch::Tensor> g{torch::randn({1000, 37}, opt).to(torch::kBFloat16), torch::Tensor(),
                                     torch::randn({5}, opt) * 100, torch::randn({65536}, opt).to(torch::kBFloat16)};
  double sq = 0;
  for (const auto& t : g)
    if (t.defined()) sq += t.to(torch::kFloat64).pow(2).sum().item<double>();
  const torch::Tensor n = loom::global_grad_norm(g);
  CHECK(n.scalar_type() == torch::kFloat32);
  CHECK(n.device() == cuda());
  CHECK(std::abs(n.item<double>() - std::sqrt(sq)) < 1e-5 * std::sqrt(sq));
  CHECK(loom::global_grad_norm({torch::Tensor()}).item<double>() == 0.0);
}
