#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "communicator.h"
#include "launch.h"
#include "optimizer.h"
#include "safetensors.h"
#include "test_util.h"
#include "zero.h"

using namespace loom;

namespace {
struct Params {
  torch::Tensor w = torch::ones({1, 2}).requires_grad_(true);
  torch::Tensor b = torch::ones({2}).requires_grad_(true);
  torch::Tensor e = torch::ones({2, 1}).requires_grad_(true);
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    return {{"layers.0.w", w}, {"layers.0.bias", b}, {"tok_embeddings.weight", e}};
  }
  void grads(float g0, float g1) {
    w.mutable_grad() = torch::tensor({{g0, g1}});
    b.mutable_grad() = torch::zeros({2});
    e.mutable_grad() = torch::zeros({2, 1});
  }
};
OptimizerOptions opts() {
  OptimizerOptions o;
  o.weight_decay = 0.1;
  o.clip_grad_norm = 1.0;
  return o;
}
}  // namespace

TEST_CASE("AdamW first step in closed form with clipping and no-decay groups") {
  Params p;
  Optimizer opt(p.named(), opts());
  CHECK(opt.num_decay() == 1);
  CHECK(opt.no_decay_names() == std::vector<std::string>{"layers.0.bias", "tok_embeddings.weight"});
  p.grads(3, 4);
  const OptimizerStepResult r = opt.step(0.1);
  CHECK_FALSE(r.skipped);
  CHECK(r.grad_norm == Approx(5.0).epsilon(1e-7));  // logged before clipping
  // First step: m_hat = g, v_hat = g^2, so p' = p (1 - lr wd) - lr g / (|g| + eps), g clipped.
  const double coef = 1.0 / (5.0 + 1e-6);
  for (int i = 0; i < 2; ++i) {
    const double g = (i ? 4.0 : 3.0) * coef;
    const double want = 1.0 * (1 - 0.1 * 0.1) - 0.1 * g / (g + 1e-8);
    CHECK(p.w[0][i].item<double>() == Approx(want).epsilon(4 * std::numeric_limits<float>::epsilon()));
  }
  // Zero gradients and no decay: untouched to the bit.
  CHECK(torch::equal(p.b, torch::ones({2})));
  CHECK(torch::equal(p.e, torch::ones({2, 1})));
  CHECK(opt.updates() == 1);
}

TEST_CASE("an inf or NaN gradient skips the update entirely") {
  Params p;
  Optimizer opt(p.named(), opts());
  p.grads(std::nanf(""), 1);
  OptimizerStepResult r = opt.step(0.1);
  CHECK(r.skipped);
  CHECK(std::isnan(r.grad_norm));
  p.grads(std::numeric_limits<float>::infinity(), 1);
  CHECK(opt.step(0.1).skipped);
  CHECK(opt.updates() == 0);
  CHECK(torch::equal(p.w, torch::ones({1, 2})));
  for (const auto& [name, t] : opt.state())
    if (name != "step") CHECK(torch::equal(t, torch::zeros_like(t)));
}

TEST_CASE("optimizer state round-trips through safetensors, with bf16 master weights") {
  test::TempDir dir("opt");
  torch::Tensor w = torch::ones({2, 2}, torch::kBFloat16).requires_grad_(true);
  Optimizer a({{"w", w}}, opts());
  w.mutable_grad() = torch::full({2, 2}, 0.001, torch::kBFloat16);
  a.step(1e-4);
  // The fp32 master keeps an update that bf16 cannot represent (1 - 1e-4 rounds to 1 in bf16).
  safetensors::NamedTensors st = a.state();
  REQUIRE(st.size() == 4);
  CHECK(st[3].first == "master.w");
  CHECK(st[3].second[0][0].item<float>() < 1.0f);
  CHECK(w[0][0].item<float>() == 1.0f);
  safetensors::write(dir / "o.safetensors", st);
  torch::Tensor w2 = torch::ones({2, 2}, torch::kBFloat16).requires_grad_(true);
  Optimizer b({{"w", w2}}, opts());
  b.load_state(safetensors::Reader(dir / "o.safetensors"));
  CHECK(b.updates() == 1);
  for (size_t i = 0; i < st.size(); ++i) CHECK(torch::equal(b.state()[i].second, st[i].second));
  // A shape mismatch names the tensor.
  torch::Tensor w3 = torch::ones({3}, torch::kBFloat16).requires_grad_(true);
  Optimizer c({{"w", w3}}, opts());
  CHECK_THROWS_WITH(c.load_state(safetensors::Reader(dir / "o.safetensors")),
                    Catch::Contains("tensor 'exp_avg.w' has shape [2, 2], the optimizer expects [3]"));
}

// ZeRO-1's update is adamw_step on views of its flat shard. Its reference here is the whole-vector
// arithmetic it replaced (one pass over the flat shard, weight decay through a mask): the results
// must be the same bits, with clipping active and runs of odd lengths between decay and no-decay.
TEST_CASE("ZeRO-1 at one rank updates bitwise as the whole-vector AdamW it replaced") {
  torch::manual_seed(7);
  const std::vector<std::vector<int64_t>> shapes{{37, 5}, {7}, {13, 3}, {11, 11}, {5}, {3, 29}};
  const std::vector<bool> decay{true, false, false, true, false, true};
  std::vector<torch::Tensor> params;
  for (const auto& s : shapes) params.push_back(torch::randn(s).requires_grad_(true));
  OptimizerOptions o;
  o.weight_decay = 0.1;
  o.clip_grad_norm = 3.0;
  LaunchInfo li;
  Communicator comm(li, {}, torch::Device(torch::kCPU));
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (size_t i = 0; i < params.size(); ++i) named.emplace_back("p" + std::to_string(i), params[i]);
  ZeroOptimizer zero(comm, named, decay, o, -1);

  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat_parts, mask_parts;
  for (size_t i = 0; i < params.size(); ++i) {
    flat_parts.push_back(params[i].detach().reshape(-1).clone());
    mask_parts.push_back(torch::full({params[i].numel()}, static_cast<bool>(decay[i]), torch::kBool));
  }
  torch::Tensor master = torch::cat(flat_parts), mask = torch::cat(mask_parts);
  torch::Tensor m = torch::zeros_like(master), v = torch::zeros_like(master);
  const double lr = 1e-2;
  for (int t = 1; t <= 4; ++t) {
    std::vector<torch::Tensor> grads;
    for (auto& p : params) {
      p.mutable_grad() = torch::randn(p.sizes()) * (t % 2 ? 1.0 : 0.05);  // odd steps clip
      grads.push_back(p.grad().reshape(-1));
    }
    torch::Tensor g = torch::cat(grads);
    const double norm = std::sqrt(g.to(torch::kFloat64).pow(2).sum().item<double>());
    const double coef = o.clip_grad_norm / (norm + 1e-6);
    if (coef < 1.0) g.mul_(coef);
    master.mul_(torch::where(mask, torch::full({}, 1.0 - lr * o.weight_decay), torch::ones({})));
    m.mul_(o.beta1).add_(g, 1 - o.beta1);
    v.mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    master.addcdiv_(m, (v.sqrt() / std::sqrt(bc2)).add_(o.eps), -lr / bc1);

    const ZeroStepResult r = zero.step(lr);
    CHECK_FALSE(r.skipped);
    CHECK(r.grad_norm == norm);
    std::vector<torch::Tensor> now;
    for (const auto& p : params) now.push_back(p.reshape(-1));
    CHECK(torch::equal(torch::cat(now), master));
  }
  CHECK(zero.updates() == 4);
}
