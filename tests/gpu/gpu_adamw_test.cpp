// The fused AdamW kernel on CUDA against adamw_step's reference path on CPU. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include <catch2/catch.hpp>

#include "fp8_linear.h"
#include "fused_adamw.h"
#include "gpu_util.h"
#include "optimizer.h"

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

TEST_CASE("adamw_step's amax output is the largest |bf16 weight| after the update and a skipped update keeps it") {
  using loom::test::cuda;
  torch::manual_seed(45);
  const auto f32 = torch::TensorOptions().device(cuda());
  // Several blocks and a ragged tail; a view at offset 1 takes the element-by-element path; the
  // planted maximum sits in the last block of the largest tensor, the tail of another.
  const std::vector<int64_t> numels{3, 1000, 16384 * 3 + 5, 65536};
  std::vector<torch::Tensor> p, m, v, low, amax, g;
  for (int64_t n : numels) {
    p.push_back(torch::randn({n}, f32));
    m.push_back(torch::zeros({n}, f32));
    v.push_back(torch::zeros({n}, f32));
    low.push_back(torch::empty({n}, f32.dtype(torch::kBFloat16)));
    amax.push_back(torch::full({}, 123.0, f32));  // stale: the update must overwrite it
  }
  p[3][65530] = -40.0;
  p[2][16384 * 3 + 4] = 30.0;
  const torch::Tensor big = torch::randn({4098}, f32);
  p.push_back(big.narrow(0, 1, 4097));
  m.push_back(torch::zeros({4097}, f32));
  v.push_back(torch::zeros({4097}, f32));
  low.push_back(torch::empty({4098}, f32.dtype(torch::kBFloat16)).narrow(0, 1, 4097));
  amax.push_back(torch::full({}, 123.0, f32));
  std::vector<torch::Tensor> amax_some = amax;
  amax_some[1] = torch::Tensor();  // none asked for this one
  for (const auto& t : p) g.push_back(torch::randn(t.sizes(), f32).to(torch::kBFloat16));
  const loom::OptimizerOptions o;
  const torch::Tensor step = torch::ones({}, f32);
  loom::adamw_step(p, g, m, v, step, o, loom::AdamWStepArgs{1e-2}, torch::zeros({}, f32), low, amax_some);
  for (size_t j = 0; j < p.size(); ++j) {
    INFO("tensor " << j << " of " << p[j].numel());
    CHECK(torch::equal(low[j], p[j].to(torch::kBFloat16)));
    if (j == 1) {
      CHECK(amax[j].item<float>() == 123.0f);
      continue;
    }
    CHECK(amax[j].item<float>() == low[j].abs().max().to(torch::kFloat32).item<float>());
  }
  CHECK(amax[3].item<float>() > 39.0f);
  // Skipped on the device: weights, copies and maxima stay as they were.
  const torch::Tensor amax_before = amax[3].clone(), low_before = low[3].clone();
  loom::adamw_step(p, g, m, v, step, o, loom::AdamWStepArgs{10.0}, torch::ones({}, f32), low, amax);
  CHECK(torch::equal(amax[3], amax_before));
  CHECK(torch::equal(low[3], low_before));
}

TEST_CASE("the optimizer publishes its bf16 matrices' maxima for fp8_linear, and withdraws them on load") {
  using loom::test::cuda;
  torch::manual_seed(46);
  const auto bf16 = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  const torch::Tensor w = torch::randn({48, 64}, bf16).requires_grad_(true);
  const torch::Tensor b = torch::randn({48}, bf16).requires_grad_(true);
  loom::Optimizer opt({{"layers.0.w", w}, {"layers.0.b", b}}, loom::OptimizerOptions{});
  opt.publish_weight_amax();
  w.mutable_grad() = torch::randn({48, 64}, bf16);
  b.mutable_grad() = torch::randn({48}, bf16);
  CHECK(!loom::fp8_published_amax(w).defined());
  opt.step(1e-2);
  opt.settle();
  const torch::Tensor a = loom::fp8_published_amax(w);
  REQUIRE(a.defined());
  CHECK(a.item<float>() == w.detach().abs().max().to(torch::kFloat32).item<float>());
  CHECK(!loom::fp8_published_amax(b).defined());  // a vector never runs in FP8
  {
    torch::NoGradGuard no_grad;
    w.add_(1.0);  // an in-place write through ATen: the published value no longer holds
  }
  CHECK(!loom::fp8_published_amax(w).defined());
  w.mutable_grad() = torch::randn({48, 64}, bf16);
  b.mutable_grad() = torch::randn({48}, bf16);
  opt.step(1e-2);
  opt.settle();
  REQUIRE(loom::fp8_published_amax(w).defined());
  opt.load_state(opt.state(), "the test's own state");
  CHECK(!loom::fp8_published_amax(w).defined());
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

TEST_CASE("global_grad_norm's kernel: many chunks and tensors, views, same bits every run") {
  using loom::test::cuda;
  torch::manual_seed(45);
  const auto bf16 = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  // 70 tensors (two launches of the kernel), sizes across the chunk of 65536 and the 8-element
  // loads; one at an odd offset (scalar loads), one transposed (not contiguous: the other path).
  std::vector<torch::Tensor> g;
  for (int k = 0; k < 68; ++k) g.push_back(torch::randn({1 + 4099 * k}, bf16) * (1 + k % 5));
  g.push_back(torch::randn({200001}, bf16).narrow(0, 1, 200000));
  g.push_back(torch::randn({300, 77}, bf16).t());
  g.push_back(torch::randn({3 * 65536 + 5}, bf16) * 1000);
  double sq = 0;
  for (const auto& t : g) sq += t.to(torch::kFloat64).pow(2).sum().item<double>();
  const torch::Tensor n = loom::global_grad_norm(g);
  CHECK(std::abs(n.item<double>() - std::sqrt(sq)) < 2e-6 * std::sqrt(sq));
  // Deterministic: no atomics, the order fixed by the sizes.
  for (int run = 0; run < 3; ++run) CHECK(loom::global_grad_norm(g).item<float>() == n.item<float>());
  // A NaN or inf anywhere reaches the norm (the optimizer skips the step on it).
  g[40][7] = std::numeric_limits<float>::infinity();
  CHECK(std::isinf(loom::global_grad_norm(g).item<double>()));
  g[40][7] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(loom::global_grad_norm(g).item<double>()));
}
