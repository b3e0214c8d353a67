#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "optimizer.h"
#include "safetensors.h"
#include "test_util.h"

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
