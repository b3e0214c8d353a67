// The fused AdamW kernel on CUDA against adamw_step's reference path on CPU. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

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
  loom::AdamWStepOptions o;
  o.lr = 1e-2;
  o.beta2 = 0.95;
  o.weight_decay = 0.1;
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
    loom::adamw_step(p_cpu, g_cpu, m_cpu, v_cpu, step_cpu, o);
    loom::adamw_step(p_gpu, g_gpu, m_gpu, v_gpu, step_gpu, o, torch::zeros({}, torch::device(cuda())));
  }
  for (size_t j = 0; j < numels.size(); ++j) {
    CHECK((p_gpu[j].cpu() - p_cpu[j]).abs().max().item<double>() < 1e-5);
    CHECK((v_gpu[j].cpu() - v_cpu[j]).abs().max().item<double>() < 1e-6);
  }
  const torch::Tensor before = p_gpu[1].clone();
  loom::adamw_step(p_gpu, g_gpu, m_gpu, v_gpu, step_gpu, o, torch::ones({}, torch::device(cuda())));
  CHECK(torch::equal(p_gpu[1], before));
}
