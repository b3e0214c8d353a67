// weight_grad.h on CPU float64: accumulating_linear's values and gradients against plain LibTorch
// autograd over several micro-batches, the gradient added in place from the second one on, and
// what data parallelism and ZeRO rely on (post hooks seeing the sum, released or zeroed gradients).
// Label unit.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <vector>

#include "fused_ops.h"
#include "grad_ready_hooks.h"
#include "weight_grad.h"

namespace {

const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);

struct Params {
  torch::Tensor w, b;  // [out, in], [out]
};

Params make_params(int64_t in, int64_t out, uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({out, in}, f64).requires_grad_(true), torch::randn({out}, f64).requires_grad_(true)};
}

Params copy_of(const Params& p) {
  return {p.w.detach().clone().requires_grad_(true), p.b.detach().clone().requires_grad_(true)};
}

// A loss that weighs every output differently, so a wrong transpose or row shows.
torch::Tensor weighted_sum(const torch::Tensor& y) {
  return (y * torch::linspace(-1.5, 2.0, y.numel(), y.options()).view(y.sizes())).sum();
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("accumulating_linear equals torch linear and its gradients over micro-batches, added in place") {
  const int64_t in = 12, out = 7;
  const Params mine = make_params(in, out, 41), ref = copy_of(mine);
  for (int micro = 0; micro < 4; ++micro) {
    INFO("micro-batch " << micro);
    const torch::Tensor x = torch::randn({2, 5, in}, f64);
    const torch::Tensor xm = x.clone().requires_grad_(true), xr = x.clone().requires_grad_(true);
    const torch::Tensor ym = loom::accumulating_linear(xm, mine.w, mine.b);
    const torch::Tensor yr = torch::linear(xr, ref.w, ref.b);
    REQUIRE(ym.sizes() == yr.sizes());
    CHECK(max_diff(ym, yr) < 1e-12);
    const void* w_grad_before = micro > 0 ? mine.w.grad().data_ptr() : nullptr;
    weighted_sum(ym).backward();
    weighted_sum(yr).backward();
    CHECK(max_diff(xm.grad(), xr.grad()) < 1e-12);
    CHECK(max_diff(mine.w.grad(), ref.w.grad()) < 1e-12);  // the sum of every micro-batch so far
    CHECK(max_diff(mine.b.grad(), ref.b.grad()) < 1e-12);
    // From the second micro-batch on the GEMM writes into the gradient the parameter already has.
    if (micro > 0) CHECK(mine.w.grad().data_ptr() == w_grad_before);
  }
}

TEST_CASE("adds_into_grad only for a leaf's matching contiguous gradient outside grad mode") {
  Params p = make_params(4, 3, 42);
  torch::NoGradGuard no_grad;  // as inside a backward that builds no graph
  CHECK_FALSE(loom::adds_into_grad(p.w));  // no gradient yet
  p.w.mutable_grad() = torch::zeros({3, 4}, f64);
  CHECK(loom::adds_into_grad(p.w));
  p.w.mutable_grad() = torch::zeros({4, 3}, f64).t();  // not contiguous
  CHECK_FALSE(loom::adds_into_grad(p.w));
  p.w.mutable_grad() = torch::zeros({3, 4}, torch::kFloat32);  // another dtype
  CHECK_FALSE(loom::adds_into_grad(p.w));
  p.w.mutable_grad() = torch::zeros({3, 4}, f64);
  {
    torch::AutoGradMode enabled(true);  // a backward with create_graph: autograd accumulates itself
    CHECK_FALSE(loom::adds_into_grad(p.w));
  }
  const torch::Tensor frozen = torch::randn({3, 4}, f64);
  CHECK_FALSE(loom::adds_into_grad(frozen));
}

TEST_CASE("a weight used twice in one graph gets both uses' gradients in every micro-batch") {
  const Params mine = make_params(6, 6, 43), ref = copy_of(mine);
  for (int micro = 0; micro < 3; ++micro) {
    INFO("micro-batch " << micro);
    const torch::Tensor x = torch::randn({9, 6}, f64);
    weighted_sum(loom::accumulating_linear(loom::accumulating_linear(x, mine.w, {}), mine.w, mine.b)).backward();
    weighted_sum(torch::linear(torch::linear(x, ref.w), ref.w, ref.b)).backward();
    CHECK(max_diff(mine.w.grad(), ref.w.grad()) < 1e-12);
    CHECK(max_diff(mine.b.grad(), ref.b.grad()) < 1e-12);
  }
}

TEST_CASE("gradient accumulators' post hooks run after the in-place add and see the sum") {
  const Params mine = make_params(5, 4, 44), ref = copy_of(mine);
  std::vector<torch::Tensor> seen;  // w's gradient as the hook found it, one per backward
  const loom::GradReadyHooks hooks({mine.w, mine.b}, {}, [&](size_t i) {
    if (i == 0) seen.push_back(mine.w.grad().clone());
  });
  for (int micro = 0; micro < 3; ++micro) {
    const torch::Tensor x = torch::randn({8, 5}, f64);
    weighted_sum(loom::accumulating_linear(x, mine.w, mine.b)).backward();
    weighted_sum(torch::linear(x, ref.w, ref.b)).backward();
    REQUIRE(seen.size() == static_cast<size_t>(micro + 1));
    CHECK(max_diff(seen.back(), ref.w.grad()) < 1e-12);
  }
}

TEST_CASE("a released gradient is made fresh and a zeroed one is added to, as ZeRO leaves them") {
  const Params mine = make_params(5, 3, 45);
  const auto grads_of = [&](const torch::Tensor& x) {
    const Params ref = copy_of(mine);
    weighted_sum(torch::linear(x, ref.w, ref.b)).backward();
    return ref;
  };
  const torch::Tensor x1 = torch::randn({4, 5}, f64), x2 = torch::randn({4, 5}, f64);
  weighted_sum(loom::accumulating_linear(x1, mine.w, mine.b)).backward();
  // ZeRO-2/3 release the gradients after each micro-batch's reduction: the next one starts anew.
  mine.w.mutable_grad() = torch::Tensor();
  mine.b.mutable_grad() = torch::Tensor();
  weighted_sum(loom::accumulating_linear(x2, mine.w, mine.b)).backward();
  CHECK(max_diff(mine.w.grad(), grads_of(x2).w.grad()) < 1e-12);
  // ZeRO-1 and the replicated optimizer on CPU zero them between steps: the first micro-batch adds.
  mine.w.mutable_grad().zero_();
  mine.b.mutable_grad().zero_();
  const void* kept = mine.w.grad().data_ptr();
  weighted_sum(loom::accumulating_linear(x1, mine.w, mine.b)).backward();
  CHECK(mine.w.grad().data_ptr() == kept);
  CHECK(max_diff(mine.w.grad(), grads_of(x1).w.grad()) < 1e-12);
  CHECK(max_diff(mine.b.grad(), grads_of(x1).b.grad()) < 1e-12);
}

TEST_CASE("bias gradients off CUDA: float64 sums exact, bf16 rounded once from an fp32 sum") {
  torch::manual_seed(23);
  const torch::Tensor dy = torch::randn({37, 24}, f64);
  torch::Tensor out = torch::full({24}, 7.0, f64);
  loom::fused_bias_grad(out, dy, /*add=*/false);
  CHECK(torch::equal(out, dy.sum(0)));
  const torch::Tensor before = torch::randn({24}, f64);
  out = before.clone();
  loom::fused_bias_grad(out, dy, /*add=*/true);
  CHECK(max_diff(out, before + dy.sum(0)) < 1e-12);
  // bf16: the old gradient plus the fp32 sum, rounded to bf16 once (not the sum rounded first).
  const torch::Tensor dy16 = (dy * 3).to(torch::kBFloat16), start = torch::randn({24}, f64).to(torch::kBFloat16);
  torch::Tensor g = start.clone();
  loom::fused_bias_grad(g, dy16, /*add=*/true);
  CHECK(torch::equal(g, (start.to(torch::kFloat32) + dy16.to(torch::kFloat32).sum(0)).to(torch::kBFloat16)));
  // No rows: a fresh gradient is zero, an accumulated one unchanged.
  g = start.clone();
  loom::fused_bias_grad(g, dy16.narrow(0, 0, 0), /*add=*/true);
  CHECK(torch::equal(g, start));
  loom::fused_bias_grad(g, dy16.narrow(0, 0, 0), /*add=*/false);
  CHECK(torch::equal(g, torch::zeros({24}, g.options())));
}
