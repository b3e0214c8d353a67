// The FP8 linear (trainer/kernels/fp8_linear.h) against references: its forward and gradients
// equal fp32 matmuls of the FP8-rounded operands up to accumulation order (tight), and the bf16
// linear within FP8's rounding (loose); quantization round trips; scales stay finite on planted
// large and all-zero inputs. Label gpu; needs a GPU with FP8 tensor cores.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <array>

#include <catch2/catch.hpp>

#include "fp8_linear.h"
#include "fused_ops.h"
#include "gpu_util.h"
#include "model.h"

namespace {

using loom::test::cuda;

// ||a - b|| / ||b|| over all elements, in float64.
double rel_norm_err(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor ad = a.detach().to(torch::kFloat64).cpu(), bd = b.detach().to(torch::kFloat64).cpu();
  return ((ad - bd).norm() / (bd.norm() + 1e-30)).item<double>();
}

struct Grads {
  torch::Tensor y, dx, dw, db;
};

// y = f(x, w, b) and the gradients of sum(y * up).
template <typename F>
Grads run(F f, const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, const torch::Tensor& up) {
  const torch::Tensor xg = x.detach().clone().requires_grad_(true), wg = w.detach().clone().requires_grad_(true);
  const torch::Tensor bg = b.defined() ? b.detach().clone().requires_grad_(true) : torch::Tensor();
  const torch::Tensor y = f(xg, wg, bg);
  (y.to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
  return {y.detach(), xg.grad(), wg.grad(), bg.defined() ? bg.grad() : torch::Tensor()};
}

void require_fp8() {
  std::string why;
  if (!loom::fp8_supported(cuda(), &why)) FAIL("FP8 not supported here: " << why);
}

}  // namespace

TEST_CASE("FP8 round trips keep e4m3 and e5m2 relative precision and the tensor's scale") {
  require_fp8();
  torch::manual_seed(81);
  const torch::Tensor x = (torch::randn({64, 256}, torch::TensorOptions().device(cuda())) * 5).to(torch::kBFloat16);
  const torch::Tensor xf = x.to(torch::kFloat32);
  for (bool e5m2 : {false, true}) {
    INFO("e5m2 " << e5m2);
    const torch::Tensor r = loom::fp8_round_trip(x, e5m2);
    // Round to nearest with 3 (e4m3) or 2 (e5m2) mantissa bits: relative error <= 2^-4 or 2^-3 for
    // normal numbers; the largest element maps to the format's max and back exactly.
    const double bound = e5m2 ? 0.125 : 0.0625;
    const torch::Tensor big = xf.abs() > xf.abs().max() * (e5m2 ? 1e-4 : 1e-2);
    const torch::Tensor rel = ((r - xf).abs() / xf.abs().clamp_min(1e-30)).masked_select(big);
    CHECK(rel.max().item<double>() <= bound + 1e-6);
    CHECK(r.abs().max().item<double>() == Approx(xf.abs().max().item<double>()).epsilon(1e-6));
  }
}

TEST_CASE("FP8 linear equals fp32 matmuls of its rounded operands, forward and backward") {
  require_fp8();
  // [B, T, K] x [N, K]: whole and partial 128 x 128 quantization tiles in every operand's layouts.
  for (const auto& [B, T, K, N] : {std::array<int64_t, 4>{4, 48, 256, 384}, std::array<int64_t, 4>{3, 16, 208, 80}})
  for (bool bias : {true, false}) {
    INFO("bias " << bias << " x [" << B << ", " << T << ", " << K << "], w [" << N << ", " << K << "]");
    torch::manual_seed(82);
    const auto bf = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
    const torch::Tensor x = torch::randn({B, T, K}, bf);
    const torch::Tensor w = torch::randn({N, K}, bf) * 0.05;
    const torch::Tensor b = bias ? torch::randn({N}, bf) : torch::Tensor();
    const torch::Tensor up = torch::randn({B, T, N}, bf);
    const Grads got = run([](auto& a, auto& c, auto& d) { return loom::fp8_linear(a, c, d); }, x, w, b, up);
    CHECK(got.y.scalar_type() == torch::kBFloat16);
    CHECK(got.dx.sizes() == x.sizes());
    CHECK(got.dw.sizes() == w.sizes());

    // The reference multiplies exactly what the GEMMs see, in fp32: only the summation order and
    // the final bf16 rounding differ.
    const torch::Tensor x2 = x.reshape({-1, K});
    const torch::Tensor qx = loom::fp8_round_trip(x2, false), qw = loom::fp8_round_trip(w, false);
    torch::Tensor y_ref = torch::matmul(qx, qw.t());
    if (bias) y_ref = y_ref + b.to(torch::kFloat32);
    CHECK(rel_norm_err(got.y.reshape({-1, N}), y_ref) < 6e-3);
    const torch::Tensor dy = up.reshape({-1, N});  // d sum(y * up) / dy
    const torch::Tensor qdy = loom::fp8_round_trip(dy, true);
    CHECK(rel_norm_err(got.dx.reshape({-1, K}), torch::matmul(qdy, qw)) < 6e-3);
    CHECK(rel_norm_err(got.dw, torch::matmul(qdy.t(), qx)) < 6e-3);
    if (bias) CHECK(rel_norm_err(got.db, dy.to(torch::kFloat32).sum(0)) < 6e-3);

    // Against the bf16 linear: FP8's own rounding (e4m3 ~3%, e5m2 ~6% per element, averaging
    // down over the sums).
    const Grads want = run([](auto& a, auto& c, auto& d) { return torch::linear(a, c, d); }, x, w, b, up);
    CHECK(rel_norm_err(got.y, want.y) < 0.05);
    CHECK(rel_norm_err(got.dx, want.dx) < 0.08);
    CHECK(rel_norm_err(got.dw, want.dw) < 0.08);
  }
}

TEST_CASE("FP8 linear pair of one input equals two FP8 linears, forward and backward") {
  require_fp8();
  torch::manual_seed(86);
  const auto bf = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  const torch::Tensor x = torch::randn({2, 64, 128}, bf);
  const torch::Tensor w1 = torch::randn({192, 128}, bf) * 0.05, w2 = torch::randn({192, 128}, bf) * 0.05;
  const torch::Tensor up1 = torch::randn({2, 64, 192}, bf), up2 = torch::randn({2, 64, 192}, bf);
  auto grads = [&](bool pair) {
    const torch::Tensor xg = x.clone().requires_grad_(true);
    const torch::Tensor a = w1.clone().requires_grad_(true), b = w2.clone().requires_grad_(true);
    std::vector<torch::Tensor> y = pair ? loom::fp8_linear_pair(xg, a, b)
                                        : std::vector<torch::Tensor>{loom::fp8_linear(xg, a, {}), loom::fp8_linear(xg, b, {})};
    ((y[0].to(torch::kFloat32) * up1.to(torch::kFloat32)).sum() + (y[1].to(torch::kFloat32) * up2.to(torch::kFloat32)).sum())
        .backward();
    return std::vector<torch::Tensor>{y[0].detach(), y[1].detach(), xg.grad(), a.grad(), b.grad()};
  };
  const auto got = grads(true), want = grads(false);
  // The same quantized operands through the same GEMMs: equal; the input gradient is the same sum.
  for (size_t i : {0, 1, 3, 4}) CHECK(torch::equal(got[i], want[i]));
  CHECK(rel_norm_err(got[2], want[2]) < 1e-6);
}

TEST_CASE("FP8 linear uses a weight's published maximum while the weight is unchanged, then measures it again") {
  require_fp8();
  torch::manual_seed(84);
  const auto bf16 = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  const torch::Tensor x = torch::randn({64, 128}, bf16), w = torch::randn({96, 128}, bf16);
  const auto forward = [&] {
    torch::NoGradGuard no_grad;
    return loom::fp8_linear(x, w, {});
  };
  const torch::Tensor ref = forward();
  const torch::Tensor true_amax = w.abs().max().to(torch::kFloat32);
  loom::fp8_publish_amax(w, true_amax);
  CHECK(torch::equal(forward(), ref));  // the same scale, measured elsewhere
  // Proof that the published value is the one used. Not a power of two: scaling by one moves only
  // the exponents, and every weight would round to the same product.
  loom::fp8_publish_amax(w, true_amax * 3);
  CHECK(!torch::equal(forward(), ref));
  w.mul_(1.0);                           // an in-place write: the published value is stale
  CHECK(!loom::fp8_published_amax(w).defined());
  CHECK(torch::equal(forward(), ref));
  loom::fp8_publish_amax(w, true_amax * 3);
  loom::fp8_forget_amax(w);
  CHECK(torch::equal(forward(), ref));
}

TEST_CASE("a published maximum dies with its tensor") {
  require_fp8();
  const auto opt = torch::TensorOptions().device(cuda());
  const torch::Tensor amax = torch::ones({}, opt);
  for (int k = 0; k < 3000; ++k) {  // past the registry's first sweep
    const torch::Tensor t = torch::empty({16}, opt);
    loom::fp8_publish_amax(t, amax);
    REQUIRE(loom::fp8_published_amax(t).defined());
  }
  // A new tensor, whether or not it lands where a dead one lived, has no maximum.
  CHECK(!loom::fp8_published_amax(torch::empty({16}, opt)).defined());
  CHECK(amax.use_count() < 2000);  // entries of dead tensors are swept, not kept one per tensor
}

namespace {

// Identity whose backward keeps the gradient autograd hands it: the tensor an FP8 linear's
// backward would receive in its place.
struct Probe : torch::autograd::Function<Probe> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    received().push_back(grads[0]);
    return {grads[0]};
  }
  static std::vector<torch::Tensor>& received() {
    static std::vector<torch::Tensor> r;
    return r;
  }
};

// The published maximum of t, which must equal max |t| exactly.
void check_published(const torch::Tensor& t) {
  const torch::Tensor a = loom::fp8_published_amax(t);
  REQUIRE(a.defined());
  CHECK(a.item<float>() == t.abs().max().to(torch::kFloat32).item<float>());
}

}  // namespace

TEST_CASE("fused RMSNorm and SwiGLU publish the maxima of what they make, as stored") {
  torch::manual_seed(85);
  for (const auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    const auto opt = torch::TensorOptions().device(cuda()).dtype(dtype);
    const torch::Tensor x = torch::randn({3, 37, 256}, opt) * 5, w = torch::randn({256}, opt);
    const torch::Tensor y = loom::fused_rmsnorm(x, w, 1e-5, /*publish_fp8_amax=*/true);
    check_published(y);
    CHECK(torch::equal(y, loom::fused_rmsnorm(x, w, 1e-5)));
    CHECK(!loom::fp8_published_amax(loom::fused_rmsnorm(x, w, 1e-5)).defined());
    // bf16 of 8-multiple size takes the 16-byte kernels; 5 x 333 and fp32 the scalar ones.
    for (const int64_t cols : {int64_t{512}, int64_t{333}}) {
      const torch::Tensor a0 = (torch::randn({5, cols}, opt) * 4).requires_grad_(true);
      const torch::Tensor b0 = (torch::randn({5, cols}, opt) * 4).requires_grad_(true);
      Probe::received().clear();
      const torch::Tensor g = loom::fused_swiglu(Probe::apply(a0), Probe::apply(b0), /*publish_fp8_amax=*/true);
      check_published(g);
      g.backward(torch::randn_like(g) * 100);
      REQUIRE(Probe::received().size() == 2);
      for (const auto& grad : Probe::received()) check_published(grad);
      Probe::received().clear();
    }
  }
}

TEST_CASE("fused QKV rotary publishes the maximum of the fused gradient it hands back") {
  torch::manual_seed(87);
  const int64_t B = 2, T = 24, H = 4, K = 2;
  // D 128 (bf16: 16-byte rotation and copy), 10 (element-wise rotation, 4-byte copy); v's gradient
  // present or not (then zeros).
  for (const auto dtype : {torch::kBFloat16, torch::kFloat32})
    for (const int64_t D : {int64_t{128}, int64_t{10}})
      for (const bool use_v : {true, false}) {
        INFO("dtype " << dtype << " D " << D << " v used " << use_v);
        const auto opt = torch::TensorOptions().device(cuda()).dtype(dtype);
        const auto f32 = torch::TensorOptions().device(cuda()).dtype(torch::kFloat32);
        const torch::Tensor angle = torch::rand({B, T, D / 2}, f32) * 6.3;
        const torch::Tensor x = (torch::randn({B, T, (H + 2 * K) * D}, opt)).requires_grad_(true);
        Probe::received().clear();
        const std::vector<torch::Tensor> r =
            loom::fused_qkv_rotary(Probe::apply(x), H, K, angle.cos(), angle.sin(), /*publish_fp8_amax=*/true);
        torch::Tensor loss = (r[0].to(torch::kFloat32) * 3).sum() + (r[1].to(torch::kFloat32) * -2).sum();
        if (use_v) loss = loss + (r[2].to(torch::kFloat32) * torch::randn(r[2].sizes(), f32) * 50).sum();
        loss.backward();
        REQUIRE(Probe::received().size() == 1);
        check_published(Probe::received()[0]);
        Probe::received().clear();
      }
}

TEST_CASE("an FP8 MLP fed published maxima equals one that measures them itself, bit for bit") {
  require_fp8();
  torch::manual_seed(86);
  const auto bf16 = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  const torch::Tensor x0 = torch::randn({2, 128, 128}, bf16), nw0 = torch::rand({128}, bf16) + 0.5;
  const torch::Tensor w10 = torch::randn({256, 128}, bf16) * 0.1, w20 = torch::randn({256, 128}, bf16) * 0.1;
  const torch::Tensor w30 = torch::randn({128, 256}, bf16) * 0.1, up = torch::randn({2, 128, 128}, bf16);
  const auto run_mlp = [&](bool publish) {
    std::vector<torch::Tensor> leaves;
    for (const auto& t : {x0, nw0, w10, w20, w30}) leaves.push_back(t.clone().requires_grad_(true));
    const torch::Tensor h = loom::fused_rmsnorm(leaves[0], leaves[1], 1e-5, publish);
    CHECK(loom::fp8_published_amax(h).defined() == publish);
    const std::vector<torch::Tensor> gu = loom::fp8_linear_pair(h, leaves[2], leaves[3]);
    const torch::Tensor y = loom::fp8_linear(loom::fused_swiglu(gu[0], gu[1], publish), leaves[4], {});
    (y.to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
    std::vector<torch::Tensor> out{y.detach()};
    for (const auto& l : leaves) out.push_back(l.grad());
    return out;
  };
  const auto published = run_mlp(true), measured = run_mlp(false);
  for (size_t i = 0; i < published.size(); ++i) {
    INFO("output " << i << " (y, then the gradients of x, the norm's weight, w1, w2, w3)");
    CHECK(torch::equal(published[i], measured[i]));
  }
}

TEST_CASE("FP8 linear scales stay finite on a planted large activation and on zeros") {
  require_fp8();
  torch::manual_seed(83);
  const auto bf = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  const torch::Tensor w = torch::randn({128, 64}, bf) * 0.05;
  const torch::Tensor up = torch::randn({32, 128}, bf);
  for (double planted : {3e4, 1e30, 0.0}) {
    INFO("planted " << planted);
    torch::Tensor x = planted == 0 ? torch::zeros({32, 64}, bf) : torch::randn({32, 64}, bf);
    if (planted != 0) x[5][7] = planted;
    const Grads g = run([](auto& a, auto& c, auto& d) { return loom::fp8_linear(a, c, d); }, x, w, torch::Tensor(), up);
    CHECK(torch::isfinite(g.y).all().item<bool>());
    CHECK(torch::isfinite(g.dx).all().item<bool>());
    CHECK(torch::isfinite(g.dw).all().item<bool>());
    // Row 5 carries the planted value: its output is that value times column 7 of w, to FP8's precision.
    if (planted != 0) {
      const torch::Tensor want = w.select(1, 7).to(torch::kFloat32) * planted;
      CHECK(rel_norm_err(g.y[5], want) < 0.08);
    } else {
      CHECK(g.y.abs().max().item<double>() == 0.0);
    }
  }
}

TEST_CASE("model.precision=fp8 trains a small model on the GPU like bf16 does") {
  require_fp8();
  loom::ModelOptions o;
  o.hidden_size = 256;
  o.num_layers = 2;
  o.num_attention_heads = 4;
  o.vocab_size = 512;
  o.dtype = torch::kBFloat16;
  const loom::Batch b = loom::test::make_packed_batch({{40, 24}, {64}}, 64, 512, 84).to(cuda());
  std::vector<double> losses[2];
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    o.fp8 = fp8 == 1;
    loom::InternLM model(o, loom::ModelInit{cuda(), 85});
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-2));
    for (int step = 0; step < 8; ++step) {
      opt.zero_grad();
      const torch::Tensor logits = model->forward(b);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(
          logits.view({-1, 512}), b.labels.view({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().ignore_index(loom::kIgnoreIndex));
      loss.backward();
      opt.step();
      losses[fp8].push_back(loss.item<double>());
    }
  }
  INFO("bf16 " << losses[0].front() << " -> " << losses[0].back() << ", fp8 " << losses[1].front() << " -> "
               << losses[1].back());
  // The same weights give the same first loss to FP8's rounding; both then learn the batch (a
  // tiny model memorising random tokens at a high rate diverges in detail, so only the ends compare).
  CHECK(std::abs(losses[1][0] - losses[0][0]) < 0.01 * losses[0][0]);
  CHECK(losses[1].back() < losses[1].front() - 1.0);
  CHECK(std::abs(losses[1].back() - losses[0].back()) < 0.1 * losses[0].back());
}
