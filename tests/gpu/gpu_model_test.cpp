// The InternLM model on CUDA: fp32 forward/backward equal the CPU's, layers that leave their
// output split for the next norm equal recomputed (unsplit) ones, and a short bf16 run with flash
// attention, the fused kernels, the chunked loss and fused AdamW on fp32 master weights learns.
// Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "chunked_loss.h"
#include "attention_select.h"
#include "flash_attention.h"
#include "fused_adamw.h"
#include "gpu_util.h"
#include "loss.h"
#include "model.h"

namespace {

using loom::test::cuda;
using loom::test::rel_err;

loom::ModelOptions small_model(torch::Dtype dtype) {
  loom::ModelOptions o;
  o.hidden_size = 128;
  o.num_layers = 2;
  o.num_attention_heads = 4;
  o.num_kv_attention_heads = 2;
  o.vocab_size = 512;
  o.dtype = dtype;
  return o;
}

// Gradients by parameter name, on the CPU (parameters the loss did not reach have none).
std::map<std::string, torch::Tensor> grads(loom::InternLM& m) {
  std::map<std::string, torch::Tensor> g;
  for (const auto& p : m->named_parameters())
    if (p.value().grad().defined()) g[p.key()] = p.value().grad().cpu();
  return g;
}

}  // namespace

TEST_CASE("InternLM forward and backward on CUDA equal the CPU in fp32") {
  const loom::test::ExactFp32Matmuls exact;
  const loom::ModelOptions o = small_model(torch::kFloat32);
  torch::manual_seed(51);
  loom::InternLM cpu(o);
  torch::manual_seed(51);
  loom::InternLM gpu(o);
  gpu->to(cuda());
  const loom::Batch b = loom::test::make_packed_batch({{20, 30, 14}, {40, 10}}, 64, o.vocab_size, 52);
  const loom::Batch bg = b.to(cuda());

  const torch::Tensor lc = cpu->forward(b);
  const torch::Tensor lg = gpu->forward(bg);
  CHECK(rel_err(lg, lc) < 1e-5);
  {
    torch::NoGradGuard no_grad;  // forward() is the head applied to hidden_states()
    CHECK(rel_err(torch::linear(gpu->hidden_states(bg), gpu->head_weight()), lg) < 1e-6);
  }
  const loom::LossResult rc = loom::compute_loss(lc, b, 0.0, 1);
  const loom::LossResult rg = loom::compute_loss(lg, bg, 0.0, 1);
  CHECK(rg.loss_sum.item<double>() == Approx(rc.loss_sum.item<double>()).epsilon(1e-5));
  rc.loss_sum.backward();
  rg.loss_sum.backward();
  const auto gc = grads(cpu), gg = grads(gpu);
  REQUIRE(gc.size() == gg.size());
  for (const auto& [name, g] : gc) {
    INFO(name);
    CHECK(rel_err(gg.at(name), g) < 1e-4);
  }
}

TEST_CASE("a short bf16 run with flash or cuDNN attention, fused kernels, chunked loss and fused AdamW learns a batch") {
  const loom::ModelOptions o = small_model(torch::kBFloat16);
  const bool cudnn = GENERATE(false, true);
  INFO((cudnn ? "cuDNN attention" : "flash attention"));
  torch::manual_seed(61);
  loom::InternLM model(o);
  model->to(cuda());
  model->set_attention(loom::make_attention_kernel(
      cudnn ? loom::AttentionKernel::kCudnnSegments : loom::AttentionKernel::kFlashVarlen, cuda(), o.dtype,
      o.head_dim(), loom::AttentionShape{o.num_attention_heads, o.kv_heads(), 128, false}));
  const loom::Batch b = loom::test::make_packed_batch({{100, 28}, {64, 64}}, 128, o.vocab_size, 62).to(cuda());
  // fp32 master weights and moments; bf16 parameters are copies refreshed after every update.
  std::vector<torch::Tensor> params, master, m, v;
  for (const auto& p : model->parameters()) {
    params.push_back(p);
    master.push_back(p.detach().to(torch::kFloat32));
    m.push_back(torch::zeros_like(master.back()));
    v.push_back(torch::zeros_like(master.back()));
  }
  const torch::Tensor step = torch::zeros({}, torch::device(cuda()));
  loom::OptimizerOptions ao;  // torch's AdamW defaults
  ao.beta2 = 0.999;
  ao.weight_decay = 0;
  const loom::AdamWStepArgs args{3e-3};
  std::vector<double> losses;
  for (int i = 0; i < 30; ++i) {
    // The trainer's CUDA path: hidden states, then head + loss chunk by chunk (fused kernel).
    const loom::LossResult r = loom::compute_chunked_loss(model->hidden_states(b), model->head_weight(), b, 0.0, 1);
    const torch::Tensor loss = r.loss_sum / r.tokens;
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    loss.backward();
    std::vector<torch::Tensor> g;
    for (auto& p : params) g.push_back(p.grad().to(torch::kFloat32));
    step.add_(1);
    loom::adamw_step(master, g, m, v, step, ao, args);
    {
      torch::NoGradGuard ng;
      for (size_t j = 0; j < params.size(); ++j) params[j].copy_(master[j]);
    }
    losses.push_back(loss.item<double>());
  }
  INFO("first loss " << losses.front() << " last " << losses.back());
  CHECK(losses.front() > 5.5);  // ~ log(512) = 6.24 at init
  CHECK(losses.back() < 0.5 * losses.front());
}

TEST_CASE("layers that leave their output split for the next norm compute what unsplit (recomputed) layers do") {
  // model.checkpoint=1 recomputes every layer, and a recomputed layer returns its residual stream
  // as one tensor; with 0 every layer leaves its MLP output for the next norm's kernel to add, and
  // with 0.5 the first layer does not split and the later ones do. Same weights, same batch.
  const loom::test::ExactFp32Matmuls exact;
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const double fraction = GENERATE(0.0, 0.5);
  INFO(loom::dtype_name(dtype) << ", checkpoint " << fraction);
  loom::ModelOptions o = small_model(dtype);
  o.num_layers = 4;
  const loom::Batch b = loom::test::make_packed_batch({{20, 30, 14}, {40, 10}}, 64, o.vocab_size, 71).to(cuda());
  auto run = [&](double checkpoint) {
    loom::ModelOptions oc = o;
    oc.checkpoint = checkpoint;
    torch::manual_seed(72);
    loom::InternLM m(oc);
    m->to(cuda());
    const torch::Tensor h = m->hidden_states(b);
    // A loss that weighs every position and channel differently.
    (h * torch::linspace(-1, 1, h.numel(), h.options()).view(h.sizes())).sum().backward();
    return std::make_pair(h.detach(), grads(m));
  };
  const auto [h_ref, g_ref] = run(1.0);
  const auto [h, g] = run(fraction);
  // fp32: the same sums in another kernel; bf16: the stream is rounded once either way.
  const double tol = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
  CHECK(rel_err(h, h_ref) < tol);
  // A gradient for the embedding, each layer's 9 parameters and the final norm: all but the head's
  // (hidden_states stops before it).
  REQUIRE(g_ref.size() == 1 + 9 * static_cast<size_t>(o.num_layers) + 1);
  REQUIRE(g.size() == g_ref.size());
  for (const auto& [name, gr] : g_ref) {
    INFO(name);
    CHECK(rel_err(g.at(name), gr) < tol);
  }
}
