// Weight gradients added inside their GEMMs over a step's micro-batches (weight_grad.h) on the
// GPU: the bf16 projection, the gated projection and the FP8 linear (cuBLASLt's FP8 GEMM with
// beta 1) against float64 sums of each micro-batch's reference, the gradient's memory kept from
// the second micro-batch on; and the FP8 weight cache (fp8_linear's cache_weight): reused while
// the weight is unchanged, dropped when its maximum is republished or forgotten; the chunked
// loss's head gradient scaled and added in one pass (fused_scale_add_); the embedding's token rows
// added into its gradient (fused_embedding); bias gradients as deterministic column sums
// (fused_bias_grad). Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "chunked_loss.h"
#include "fp8_linear.h"
#include "fused_ops.h"
#include "gpu_util.h"
#include "loss.h"
#include "weight_grad.h"

namespace {

using loom::test::cuda;

torch::TensorOptions bf16() { return torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16); }

// ||a - b|| / ||b|| over all elements, in float64.
double rel_norm_err(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor ad = a.detach().to(torch::kFloat64).cpu(), bd = b.detach().to(torch::kFloat64).cpu();
  return ((ad - bd).norm() / (bd.norm() + 1e-30)).item<double>();
}

torch::Tensor f64(const torch::Tensor& t) { return t.detach().to(torch::kFloat64); }

void require_fp8() {
  std::string why;
  if (!loom::fp8_supported(cuda(), &why)) FAIL("FP8 not supported here: " << why);
}

}  // namespace

TEST_CASE("bf16 projections add each micro-batch's weight gradient in the GEMM: float64 sums") {
  const int64_t K = 256, N = 384;
  torch::manual_seed(91);
  const torch::Tensor w = (torch::randn({N, K}, bf16()) * 0.05).requires_grad_(true);
  const torch::Tensor b = torch::randn({N}, bf16()).requires_grad_(true);
  torch::Tensor dw_ref = torch::zeros({N, K}, torch::kFloat64), db_ref = torch::zeros({N}, torch::kFloat64);
  const void* kept = nullptr;
  for (int micro = 0; micro < 4; ++micro) {
    INFO("micro-batch " << micro);
    const torch::Tensor x = torch::randn({2, 96, K}, bf16()).requires_grad_(true);
    const torch::Tensor up = torch::randn({2, 96, N}, bf16());
    const torch::Tensor y = loom::accumulating_linear(x, w, b);
    CHECK(torch::equal(y.detach(), torch::addmm(b, x.detach().reshape({-1, K}), w.detach().t()).view(y.sizes())));
    (y.to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
    dw_ref += f64(up).reshape({-1, N}).t().mm(f64(x).reshape({-1, K})).cpu();
    db_ref += f64(up).reshape({-1, N}).sum(0).cpu();
    CHECK(rel_norm_err(x.grad(), f64(up).matmul(f64(w))) < 1e-2);
    // bf16 keeps 8 bits: the product rounded into the running sum once per micro-batch.
    CHECK(rel_norm_err(w.grad(), dw_ref) < 1e-2);
    CHECK(rel_norm_err(b.grad(), db_ref) < 1e-2);
    if (micro == 1) kept = w.grad().data_ptr();
    if (micro > 1) CHECK(w.grad().data_ptr() == kept);
  }
}

TEST_CASE("the gated projection adds both weights' gradients in their GEMMs from the second micro-batch") {
  const int64_t C = 128, F = 320;
  torch::manual_seed(92);
  // As the model allocates them: w2's rows after w1's in one tensor, each a leaf of its own.
  const torch::Tensor gate_up = torch::randn({2 * F, C}, bf16()) * 0.05;
  const torch::Tensor w1 = gate_up.narrow(0, 0, F).detach().requires_grad_(true);
  const torch::Tensor w2 = gate_up.narrow(0, F, F).detach().requires_grad_(true);
  std::vector<torch::Tensor> ref{torch::zeros({F, C}, torch::kFloat64), torch::zeros({F, C}, torch::kFloat64)};
  std::vector<const void*> kept;
  for (int micro = 0; micro < 3; ++micro) {
    INFO("micro-batch " << micro);
    const torch::Tensor x = torch::randn({1, 64, C}, bf16());
    const torch::Tensor up = torch::randn({1, 64, F}, bf16());
    REQUIRE(loom::fused_gated_projection_applies(x, w1, w2));
    (loom::fused_gated_projection(x, w1, w2).to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
    // float64 reference of this micro-batch: y = silu(a) * g, a = x w1^T, g = x w2^T.
    const torch::Tensor x64 = f64(x).reshape({-1, C}), up64 = f64(up).reshape({-1, F});
    const torch::Tensor a = x64.mm(f64(w1).t()), g = x64.mm(f64(w2).t());
    const torch::Tensor sig = torch::sigmoid(a), silu = a * sig;
    const torch::Tensor da = up64 * g * (sig * (1 + a * (1 - sig))), dg = up64 * silu;
    ref[0] += da.t().mm(x64).cpu();
    ref[1] += dg.t().mm(x64).cpu();
    CHECK(rel_norm_err(w1.grad(), ref[0]) < 2e-2);
    CHECK(rel_norm_err(w2.grad(), ref[1]) < 2e-2);
    if (micro == 1) kept = {w1.grad().data_ptr(), w2.grad().data_ptr()};
    if (micro > 1) CHECK(kept == std::vector<const void*>{w1.grad().data_ptr(), w2.grad().data_ptr()});
  }
}

TEST_CASE("FP8 linears add each micro-batch's weight gradient in cuBLASLt's FP8 GEMM: sums of the rounded operands") {
  require_fp8();
  for (bool bias : {true, false}) {
    INFO("bias " << bias);
    const int64_t K = 256, N = 384;
    torch::manual_seed(93);
    const torch::Tensor w = (torch::randn({N, K}, bf16()) * 0.05).requires_grad_(true);
    const torch::Tensor b = bias ? torch::randn({N}, bf16()).requires_grad_(true) : torch::Tensor();
    torch::Tensor dw_ref = torch::zeros({N, K}, torch::kFloat64), db_ref = torch::zeros({N}, torch::kFloat64);
    const void* kept = nullptr;
    for (int micro = 0; micro < 4; ++micro) {
      INFO("micro-batch " << micro);
      const torch::Tensor x = torch::randn({3, 32, K}, bf16());
      const torch::Tensor up = torch::randn({3, 32, N}, bf16());
      (loom::fp8_linear(x, w, b).to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
      // What the GEMM multiplies: the e5m2 gradient and the e4m3 input, in float64.
      const torch::Tensor qdy = loom::fp8_round_trip(up.reshape({-1, N}), true);
      const torch::Tensor qx = loom::fp8_round_trip(x.reshape({-1, K}), false);
      dw_ref += f64(qdy).t().mm(f64(qx)).cpu();
      CHECK(rel_norm_err(w.grad(), dw_ref) < 6e-3);
      db_ref += f64(up).reshape({-1, N}).sum(0).cpu();
      if (bias) CHECK(rel_norm_err(b.grad(), db_ref) < 1e-2);
      if (micro == 1) kept = w.grad().data_ptr();
      if (micro > 1) CHECK(w.grad().data_ptr() == kept);
    }
  }
}

TEST_CASE("the FP8 linear pair adds both weights' gradients over micro-batches as two FP8 linears do") {
  require_fp8();
  torch::manual_seed(94);
  const int64_t C = 128, F = 192;
  const torch::Tensor w1 = (torch::randn({F, C}, bf16()) * 0.05).requires_grad_(true);
  const torch::Tensor w2 = (torch::randn({F, C}, bf16()) * 0.05).requires_grad_(true);
  const torch::Tensor r1 = w1.detach().clone().requires_grad_(true), r2 = w2.detach().clone().requires_grad_(true);
  for (int micro = 0; micro < 3; ++micro) {
    const torch::Tensor x = torch::randn({2, 64, C}, bf16());
    const torch::Tensor up1 = torch::randn({2, 64, F}, bf16()), up2 = torch::randn({2, 64, F}, bf16());
    const auto loss = [&](const std::vector<torch::Tensor>& y) {
      return (y[0].to(torch::kFloat32) * up1.to(torch::kFloat32)).sum() +
             (y[1].to(torch::kFloat32) * up2.to(torch::kFloat32)).sum();
    };
    loss(loom::fp8_linear_pair(x, w1, w2)).backward();
    loss({loom::fp8_linear(x, r1, {}), loom::fp8_linear(x, r2, {})}).backward();
    // The same operands through the same GEMMs into the same running sums.
    CHECK(torch::equal(w1.grad(), r1.grad()));
    CHECK(torch::equal(w2.grad(), r2.grad()));
  }
}

TEST_CASE("the FP8 weight cache serves later forwards until the weight's maximum is republished or forgotten") {
  require_fp8();
  torch::manual_seed(95);
  const torch::Tensor x = torch::randn({64, 128}, bf16());
  const torch::Tensor w = torch::randn({96, 128}, bf16());
  const auto forward = [&](bool cache) {
    torch::NoGradGuard no_grad;
    return loom::fp8_linear(x, w, {}, cache);
  };
  const torch::Tensor old = forward(false);
  // Not published: nothing says when w changes, so nothing is cached.
  CHECK(torch::equal(forward(true), old));
  loom::fp8_publish_amax(w, w.abs().max().to(torch::kFloat32));
  CHECK(torch::equal(forward(true), old));  // quantized and cached
  // Rewrite w behind its version counter, as the optimizer's update kernel does: a tensor over the
  // same memory has a counter of its own.
  const torch::Tensor alias = torch::from_blob(w.data_ptr(), w.sizes(), bf16());
  alias.copy_(torch::randn({96, 128}, bf16()));
  CHECK_FALSE(torch::equal(forward(false), old));  // quantizing the new values gives another result
  CHECK(torch::equal(forward(true), old));          // the cached copies: proof they are reused
  loom::fp8_publish_amax(w, w.abs().max().to(torch::kFloat32));  // the update's republication
  const torch::Tensor fresh = forward(false);
  CHECK(torch::equal(forward(true), fresh));
  // A collective wrote w: its maximum is forgotten, and with it the cache.
  alias.mul_(2.0);
  loom::fp8_forget_amax(w);
  const torch::Tensor doubled = forward(false);
  CHECK(torch::equal(forward(true), doubled));
  // An in-place ATen write bumps w's version: the cached copies no longer match.
  loom::fp8_publish_amax(w, w.abs().max().to(torch::kFloat32));
  CHECK(torch::equal(forward(true), doubled));
  {
    torch::NoGradGuard no_grad;
    w.mul_(0.5);
  }
  CHECK(torch::equal(forward(true), forward(false)));
}

TEST_CASE("fused_scale_add_ scales a bf16 tensor by a device scalar, or adds it scaled, with one rounding") {
  torch::manual_seed(96);
  const torch::Tensor scale = torch::full({}, 1.0 / 3000.0, torch::TensorOptions().device(cuda()));
  for (int64_t n : {int64_t{4096 * 8}, int64_t{1001}}) {  // the 16-byte path; a tail of odd length
    INFO("n " << n);
    const torch::Tensor x = torch::randn({n}, bf16()), base = torch::randn({n}, bf16()) * 1e-3;
    torch::Tensor out = torch::empty({n}, bf16());
    REQUIRE(loom::fused_scale_add_applies(out, x, scale));
    loom::fused_scale_add_(out, x, scale, /*accumulate=*/false);
    CHECK(torch::equal(out, (x.to(torch::kFloat32) * scale).to(torch::kBFloat16)));
    out.copy_(base);
    loom::fused_scale_add_(out, x, scale, /*accumulate=*/true);
    const torch::Tensor want = f64(base) + f64(x) * (1.0 / 3000.0);
    // One rounding to bf16 (8 significant bits): within half a unit in the last place, at most
    // 2^-8 of the value.
    CHECK(((f64(out) - want).abs() <= want.abs() * std::ldexp(1.0, -8) * 1.001).all().item<bool>());
  }
  // Views at an odd element offset take the scalar path.
  const torch::Tensor big = torch::randn({4097}, bf16());
  torch::Tensor out = torch::empty({4097}, bf16());
  loom::fused_scale_add_(out.narrow(0, 1, 4096), big.narrow(0, 1, 4096), scale, false);
  CHECK(torch::equal(out.narrow(0, 1, 4096), (big.narrow(0, 1, 4096).to(torch::kFloat32) * scale).to(torch::kBFloat16)));
}

TEST_CASE("the chunked loss adds the bf16 head's gradient, scaled, into its gradient over micro-batches") {
  torch::manual_seed(97);
  const int64_t B = 1, T = 1024, C = 128, V = 4096;
  const auto f32 = torch::TensorOptions().device(cuda()).dtype(torch::kFloat32);
  const torch::Tensor head = (torch::randn({V, C}, f32) * 0.05).to(torch::kBFloat16).requires_grad_(true);
  const torch::Tensor ref = head.detach().to(torch::kFloat32).requires_grad_(true);
  const void* kept = nullptr;
  for (int micro = 0; micro < 3; ++micro) {
    INFO("micro-batch " << micro);
    loom::Batch b;
    b.labels = torch::randint(0, V, {B, T}, f32.dtype(torch::kLong));
    b.dataset_ids = torch::zeros({B}, f32.dtype(torch::kLong));
    const torch::Tensor hidden = torch::randn({B, T, C}, f32);
    // The loop's scaling: the token sum over the step's token count, no bf16 number.
    (loom::compute_chunked_loss(hidden, head, b, 0.0, 1, 512).loss_sum / 3000.0).backward();
    (loom::compute_loss(torch::matmul(hidden, ref.t()), b, 0.0, 1).loss_sum / 3000.0).backward();
    CHECK(loom::test::rel_err(head.grad(), ref.grad()) < 2e-2);
    if (micro == 1) kept = head.grad().data_ptr();
    if (micro > 1) CHECK(head.grad().data_ptr() == kept);
  }
}

TEST_CASE("the bf16 embedding adds its token rows' gradients over micro-batches: fp32 sums rounded once") {
  // C = 264: a partial block of columns; C = 4096: the 7b's width, several blocks a token.
  for (const int64_t C : {int64_t{264}, int64_t{4096}}) {
    INFO("C " << C);
    torch::manual_seed(98);
    const int64_t V = 1000;
    const torch::Tensor emb = torch::randn({V, C}, bf16()).requires_grad_(true);
    torch::Tensor ref = torch::zeros({V, C}, torch::kFloat64);
    const void* kept = nullptr;
    for (int micro = 0; micro < 3; ++micro) {
      INFO("micro-batch " << micro);
      // Zipf-like: a few tokens repeated hundreds of times, as real text repeats its commonest.
      const torch::Tensor ids =
          (torch::rand({2, 2048}, torch::TensorOptions().device(cuda())).pow(4) * V).to(torch::kLong).clamp_max(V - 1);
      const torch::Tensor up = torch::randn({2, 2048, C}, bf16());
      const torch::Tensor before = emb.grad().defined() ? emb.grad().clone() : torch::zeros({V, C}, bf16());
      const torch::Tensor y = loom::fused_embedding(emb, ids);
      CHECK(torch::equal(y.detach(), torch::embedding(emb.detach(), ids)));
      (y.to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
      const torch::Tensor sums = torch::zeros({V, C}, torch::kFloat64).index_add_(0, ids.reshape({-1}).cpu(),
                                                                                   f64(up).reshape({-1, C}).cpu());
      ref += sums;
      const torch::Tensor got = f64(emb.grad()).cpu();
      if (micro == 0) {
        // No gradient yet: autograd's dense backward, as torch::embedding's.
        const torch::Tensor leaf = emb.detach().clone().requires_grad_(true);
        (torch::embedding(leaf, ids).to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
        CHECK(torch::equal(emb.grad(), leaf.grad()));
        continue;
      }
      // Each row: what it held plus its tokens' rows, one rounding to bf16 (8 significant bits: half
      // a unit in the last place is at most 2^-8 of the value), after an fp32 sum (within 2^-20 of
      // its terms' magnitudes for these few hundred terms).
      const torch::Tensor want = f64(before).cpu() + sums;
      const torch::Tensor magnitude = f64(before).cpu().abs() + torch::zeros({V, C}, torch::kFloat64)
                                                                   .index_add_(0, ids.reshape({-1}).cpu(),
                                                                               f64(up).reshape({-1, C}).cpu().abs());
      CHECK(((got - want).abs() <= want.abs() * std::ldexp(1.0, -8) + magnitude * std::ldexp(1.0, -20))
                .all()
                .item<bool>());
      // Rows of tokens absent from this micro-batch are untouched, bit for bit.
      const torch::Tensor absent = sums.abs().sum(1).eq(0);
      CHECK(torch::equal(emb.grad().cpu().index({absent}), before.cpu().index({absent})));
      CHECK(rel_norm_err(emb.grad(), ref) < 1e-2);
      if (micro == 1) kept = emb.grad().data_ptr();
      if (micro > 1) CHECK(emb.grad().data_ptr() == kept);
    }
  }
}

TEST_CASE("the embedding's row adds are deterministic: the same bits from the same gradient") {
  torch::manual_seed(99);
  const int64_t V = 500, C = 512;
  const torch::Tensor ids = (torch::rand({4, 1024}, torch::TensorOptions().device(cuda())).pow(6) * V).to(torch::kLong);
  const torch::Tensor up = torch::randn({4, 1024, C}, bf16());
  const torch::Tensor start = torch::randn({V, C}, bf16());
  std::vector<torch::Tensor> results;
  for (int run = 0; run < 3; ++run) {
    const torch::Tensor emb = torch::randn({V, C}, bf16()).requires_grad_(true);
    emb.mutable_grad() = start.clone();
    (loom::fused_embedding(emb, ids).to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
    results.push_back(emb.grad().clone());
  }
  CHECK(torch::equal(results[0], results[1]));
  CHECK(torch::equal(results[0], results[2]));
  CHECK_FALSE(torch::equal(results[0], start));
}

TEST_CASE("bias gradients are column sums in fp32 rounded once, over micro-batches: float64 sums") {
  // [4096, 12288]: the 7b's fused QKV gradient a micro-batch; [16384, 2048]: the 1b's attention
  // output; [1001, 264]: rows the chunks and the loads ahead do not divide, a partial column block;
  // [5, 8]: fewer rows than a chunk. [300, 12] (N not a multiple of 8) and an unaligned dy take
  // ATen's fp32 sum instead, under the same bound.
  struct Case {
    int64_t rows, N;
    bool unaligned;  // dy starts one element into its storage
  };
  const std::vector<Case> cases{{4096, 12288, false}, {16384, 2048, false}, {1001, 264, false},
                                {5, 8, false},        {300, 12, false},     {200, 64, true}};
  for (const auto& [rows, N, unaligned] : cases) {
    INFO("dy [" << rows << ", " << N << "]" << (unaligned ? ", unaligned" : ""));
    torch::manual_seed(100 + rows);
    torch::Tensor g = torch::full({N}, 3.0, bf16());  // overwritten by the first micro-batch
    for (int micro = 0; micro < 3; ++micro) {
      INFO("micro-batch " << micro);
      // A shared offset per column, as a bias gradient's tokens agree in sign: the sums grow.
      const torch::Tensor values = torch::randn({rows, N}, bf16()) + torch::randn({1, N}, bf16()) * 0.5;
      const torch::Tensor dy =
          unaligned ? torch::empty({rows * N + 1}, bf16()).narrow(0, 1, rows * N).view({rows, N}).copy_(values)
                    : values.contiguous();
      const torch::Tensor before = micro == 0 ? torch::zeros({N}, bf16()) : g.clone();
      loom::fused_bias_grad(g, dy, /*add=*/micro > 0);
      const torch::Tensor want = f64(before).cpu() + f64(dy).sum(0).cpu();
      const torch::Tensor magnitude = f64(before).cpu().abs() + f64(dy).abs().sum(0).cpu();
      // One rounding to bf16 (half a unit in the last place: at most 2^-8 of the value) after two
      // stages of fp32 sums of at most 1024 terms each (in the worst case 2^10 * 2^-24 of their
      // magnitude).
      const torch::Tensor err = (f64(g).cpu() - want).abs();
      CHECK((err <= want.abs() * std::ldexp(1.0, -8) + magnitude * std::ldexp(1.0, -13)).all().item<bool>());
    }
  }
}

TEST_CASE("bias gradients are deterministic and keep the gradient's memory; no rows add nothing") {
  torch::manual_seed(101);
  const torch::Tensor dy = torch::randn({8192, 4096}, bf16());
  const torch::Tensor start = torch::randn({4096}, bf16());
  std::vector<torch::Tensor> results;
  for (int run = 0; run < 3; ++run) {
    torch::Tensor g = start.clone();
    const void* kept = g.data_ptr();
    loom::fused_bias_grad(g, dy, /*add=*/true);
    CHECK(g.data_ptr() == kept);
    results.push_back(g);
  }
  CHECK(torch::equal(results[0], results[1]));
  CHECK(torch::equal(results[0], results[2]));
  CHECK_FALSE(torch::equal(results[0], start));
  torch::Tensor g = start.clone();
  loom::fused_bias_grad(g, dy.narrow(0, 0, 0), /*add=*/true);
  CHECK(torch::equal(g, start));
  loom::fused_bias_grad(g, dy.narrow(0, 0, 0), /*add=*/false);
  CHECK(torch::equal(g, torch::zeros({4096}, bf16())));
}
