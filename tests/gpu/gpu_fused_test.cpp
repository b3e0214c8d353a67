// loom's fused CUDA kernels (trainer/kernels/fused_ops.h) against their unfused references, forward and
// backward, in bf16 and fp32; the rotary kernel also against the model's apply_rotary. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "attention.h"
#include "fused_ops.h"
#include "gpu_util.h"

namespace {

using loom::test::cuda;
using loom::test::rel_err;

// bf16 stores 8 significant bits (relative rounding 2^-9); the fused kernels round once where the
// references may round a few times. fp32: summation order only.
double tol(torch::Dtype d) { return d == torch::kBFloat16 ? 1.5e-2 : 2e-5; }

// Gradients of sum(f(inputs) * up) w.r.t. each input, in fp32 from fp32 copies (the reference) or
// in the inputs' dtype (the kernel).
template <typename Fn>
std::vector<torch::Tensor> grads_of(Fn f, std::vector<torch::Tensor> inputs, const torch::Tensor& up, bool to_fp32) {
  for (auto& t : inputs) t = (to_fp32 ? t.to(torch::kFloat32) : t.clone()).detach().requires_grad_(true);
  const torch::Tensor out = f(inputs);
  (out.to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
  std::vector<torch::Tensor> g{out.detach()};
  for (auto& t : inputs) g.push_back(t.grad());
  return g;
}

// rmsnorm_reference of an fp32 h whose input the kernel rounds to dtype first.
torch::Tensor rmsnorm_reference_of(const torch::Tensor& h32, const torch::Tensor& w32, torch::Dtype dtype) {
  return loom::rmsnorm_reference(h32.to(dtype).to(torch::kFloat32), w32, 1e-5);
}

}  // namespace

TEST_CASE("fused RMSNorm equals the reference forward and backward in bf16 and fp32") {
  REQUIRE(loom::fused_kernels_available());
  // The backward's shapes: one to twelve vectors of a row a thread (C 40 to 12288), and 2149 rows:
  // more than two for each of the 4 x SMs blocks, with a block left one row of its last pair.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{111, 2048}, {111, 4096}, {111, 40},    {111, 5120},
                                                           {111, 12288}, {2149, 2048}, {2149, 4096}, {2149, 40}};
  for (auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    for (const auto& [rows, C] : shapes) {
      INFO("dtype " << dtype << " rows " << rows << " C " << C);
      torch::manual_seed(71);
      const auto opt = torch::TensorOptions().device(cuda()).dtype(dtype);
      const torch::Tensor x = torch::randn({rows, C}, opt) * 3;
      const torch::Tensor w = torch::rand({C}, opt) + 0.5;
      const torch::Tensor up = torch::randn({rows, C}, opt);
      auto fused = [](const std::vector<torch::Tensor>& in) { return loom::fused_rmsnorm(in[0], in[1], 1e-5); };
      auto ref = [](const std::vector<torch::Tensor>& in) { return loom::rmsnorm_reference(in[0], in[1], 1e-5); };
      const auto got = grads_of(fused, {x, w}, up, false);
      const auto want = grads_of(ref, {x, w}, up, true);
      CHECK(got[0].scalar_type() == dtype);
      CHECK(rel_err(got[0], want[0]) < tol(dtype));
      CHECK(rel_err(got[1], want[1]) < tol(dtype));
      CHECK(rel_err(got[2], want[2]) < tol(dtype));
      // The weight's gradient sums fixed blocks of rows in a fixed order: the same bits again.
      const auto again = grads_of(fused, {x, w}, up, false);
      CHECK(torch::equal(again[1], got[1]));
      CHECK(torch::equal(again[2], got[2]));
    }
  }
}

TEST_CASE("fused rotary equals the reference and the model's apply_rotary forward and backward") {
  const int64_t B = 2, T = 100, N = 8, D = 128;
  const loom::Batch b = loom::test::make_packed_batch({{60, 40}, {100}}, T, 1000, 72).to(cuda());
  const loom::PackedContext ctx = loom::make_packed_context(b, D, 10000.0);
  const torch::Tensor cos = ctx.cos.squeeze(2).narrow(-1, 0, D / 2).contiguous();  // [B, T, D/2]
  const torch::Tensor sin = ctx.sin.squeeze(2).narrow(-1, 0, D / 2).contiguous();
  for (auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    INFO("dtype " << dtype);
    torch::manual_seed(73);
    const auto opt = torch::TensorOptions().device(cuda()).dtype(dtype);
    const torch::Tensor x = torch::randn({B, T, N, D}, opt);
    const torch::Tensor up = torch::randn({B, T, N, D}, opt);
    auto fused = [&](const std::vector<torch::Tensor>& in) { return loom::fused_rotary(in[0], cos, sin); };
    auto model = [&](const std::vector<torch::Tensor>& in) { return loom::apply_rotary(in[0], ctx); };
    const auto got = grads_of(fused, {x}, up, false);
    const auto want = grads_of(model, {x}, up, true);
    CHECK(rel_err(got[0], want[0]) < tol(dtype));
    CHECK(rel_err(got[1], want[1]) < tol(dtype));
    CHECK(rel_err(got[0], loom::rotary_reference(x, cos, sin)) < tol(dtype));

    // q read in place from a fused QKV projection [B, T, (N + 2 * 4) * D]: a strided view.
    const torch::Tensor qkv = torch::randn({B, T, (N + 8) * D}, opt).requires_grad_(true);
    const torch::Tensor q = qkv.narrow(-1, D * 4, N * D).view({B, T, N, D});
    REQUIRE_FALSE(q.is_contiguous());
    const torch::Tensor fused_q = loom::fused_rotary(q, cos, sin);
    CHECK(rel_err(fused_q, loom::rotary_reference(q.detach().contiguous(), cos, sin)) < tol(dtype));
    (fused_q.to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
    const torch::Tensor dq = qkv.grad().narrow(-1, D * 4, N * D).view({B, T, N, D});
    CHECK(rel_err(dq, want[1]) < tol(dtype));
    CHECK(qkv.grad().narrow(-1, 0, D * 4).abs().sum().item<double>() == 0.0);
  }
}

TEST_CASE("fused SwiGLU equals silu of a times b forward and backward") {
  for (auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    INFO("dtype " << dtype);
    torch::manual_seed(74);
    const auto opt = torch::TensorOptions().device(cuda()).dtype(dtype);
    // [257, 5632]: bf16 takes the 16-byte kernel; [3, 37] (111 elements) the element-wise one.
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{257, 5632}, std::vector<int64_t>{3, 37}}) {
      INFO("shape " << shape[0] << " x " << shape[1]);
      const torch::Tensor a = torch::randn(shape, opt) * 2, bb = torch::randn(shape, opt);
      const torch::Tensor up = torch::randn(shape, opt);
      auto fused = [](const std::vector<torch::Tensor>& in) { return loom::fused_swiglu(in[0], in[1]); };
      auto ref = [](const std::vector<torch::Tensor>& in) { return torch::silu(in[0]) * in[1]; };
      const auto got = grads_of(fused, {a, bb}, up, false);
      const auto want = grads_of(ref, {a, bb}, up, true);
      CHECK(rel_err(got[0], want[0]) < tol(dtype));
      CHECK(rel_err(got[1], want[1]) < tol(dtype));
      CHECK(rel_err(got[2], want[2]) < tol(dtype));
    }
  }
}

TEST_CASE("fused residual RMSNorm equals the add and the norm, and adds the residual gradient, in bf16 and fp32") {
  for (auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    for (const auto& [rows, C] : std::vector<std::pair<int64_t, int64_t>>{{111, 2048}, {111, 40}, {2149, 4096}}) {
      for (bool with_r : {true, false}) {
        INFO("dtype " << dtype << " rows " << rows << " C " << C << (with_r ? " h = x + r" : " h = x"));
        torch::manual_seed(75);
        const auto opt = torch::TensorOptions().device(cuda()).dtype(dtype);
        const torch::Tensor x = torch::randn({rows, C}, opt) * 3, r = torch::randn({rows, C}, opt);
        const torch::Tensor w = torch::rand({C}, opt) + 0.5;
        const torch::Tensor up_h = torch::randn({rows, C}, opt), up_y = torch::randn({rows, C}, opt);
        REQUIRE(loom::fused_residual_rmsnorm_applies(x, w));
        // Both outputs feed the loss, as in a layer: h the residual stream, y the branch.
        const auto loss = [&](const torch::Tensor& h, const torch::Tensor& y) {
          return (h.to(torch::kFloat32) * up_h.to(torch::kFloat32)).sum() +
                 (y.to(torch::kFloat32) * up_y.to(torch::kFloat32)).sum();
        };
        const torch::Tensor xg = x.clone().requires_grad_(true), rg = r.clone().requires_grad_(true);
        const torch::Tensor wg = w.clone().requires_grad_(true);
        const std::vector<torch::Tensor> got = loom::fused_residual_rmsnorm(xg, with_r ? rg : torch::Tensor(), wg, 1e-5);
        loss(got[0], got[1]).backward();
        const torch::Tensor x32 = x.to(torch::kFloat32).requires_grad_(true);
        const torch::Tensor r32 = r.to(torch::kFloat32).requires_grad_(true);
        const torch::Tensor w32 = w.to(torch::kFloat32).requires_grad_(true);
        // The reference rounds h to the dtype as the kernel does before normalizing it.
        const torch::Tensor h32 = with_r ? (x32 + r32) : x32;
        const torch::Tensor h_rounded = h32 + (h32.to(dtype).to(torch::kFloat32) - h32).detach();
        loss(h32, loom::rmsnorm_reference(h_rounded, w32, 1e-5)).backward();
        CHECK(got[0].scalar_type() == dtype);
        CHECK(got[1].scalar_type() == dtype);
        if (with_r) {
          CHECK(torch::equal(got[0], (x + r)));  // one rounding of an fp32 sum either way
          CHECK(rel_err(rg.grad(), r32.grad()) < tol(dtype));
          CHECK(torch::equal(rg.grad(), xg.grad()));
        } else {
          CHECK(got[0].data_ptr() == xg.data_ptr());  // x itself
        }
        CHECK(rel_err(got[1], rmsnorm_reference_of(h32.detach(), w32.detach(), dtype)) < tol(dtype));
        CHECK(rel_err(xg.grad(), x32.grad()) < tol(dtype));
        CHECK(rel_err(wg.grad(), w32.grad()) < tol(dtype));
      }
    }
  }
}

TEST_CASE("fused gated projection equals silu(x w1^T) * (x w2^T) forward and backward, weights adjacent or not") {
  const loom::test::ExactFp32Matmuls exact;  // fp32's tolerance is summation order, not TF32's rounding
  for (auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    // F = 688: bf16 takes the 16-byte kernel over the [N, 2F] halves; F = 100 the element-wise one.
    for (int64_t F : {688, 100}) {
      INFO("dtype " << dtype << " F " << F);
      torch::manual_seed(76);
      const int64_t C = 256;
      const auto opt = torch::TensorOptions().device(cuda()).dtype(dtype);
      const torch::Tensor x = torch::randn({2, 129, C}, opt);
      const torch::Tensor w12 = torch::randn({2 * F, C}, opt) / 16;
      const torch::Tensor up = torch::randn({2, 129, F}, opt);
      REQUIRE(loom::fused_gated_projection_applies(x, w12.narrow(0, 0, F), w12.narrow(0, F, F)));
      const auto run = [&](bool adjacent) {
        // Adjacent: two leaves over one allocation, as the model makes w1 and w2; else two tensors.
        const torch::Tensor base = w12.clone();
        torch::Tensor w1 = base.narrow(0, 0, F).detach(), w2 = base.narrow(0, F, F).detach();
        if (!adjacent) w1 = w1.clone(), w2 = w2.clone();
        w1.requires_grad_(true), w2.requires_grad_(true);
        const torch::Tensor xg = x.clone().requires_grad_(true);
        const torch::Tensor y = loom::fused_gated_projection(xg, w1, w2);
        (y.to(torch::kFloat32) * up.to(torch::kFloat32)).sum().backward();
        return std::vector<torch::Tensor>{y.detach(), xg.grad(), w1.grad(), w2.grad()};
      };
      const std::vector<torch::Tensor> got = run(true), copied = run(false);
      const torch::Tensor x32 = x.to(torch::kFloat32).requires_grad_(true);
      const torch::Tensor w1_32 = w12.narrow(0, 0, F).to(torch::kFloat32).requires_grad_(true);
      const torch::Tensor w2_32 = w12.narrow(0, F, F).to(torch::kFloat32).requires_grad_(true);
      const torch::Tensor y32 = torch::silu(torch::matmul(x32, w1_32.t())) * torch::matmul(x32, w2_32.t());
      (y32 * up.to(torch::kFloat32)).sum().backward();
      CHECK(got[0].sizes() == y32.sizes());
      CHECK(got[0].scalar_type() == dtype);
      CHECK(rel_err(got[0], y32) < tol(dtype));
      CHECK(rel_err(got[1], x32.grad()) < tol(dtype));
      CHECK(rel_err(got[2], w1_32.grad()) < tol(dtype));
      CHECK(rel_err(got[3], w2_32.grad()) < tol(dtype));
      // The view of adjacent weights and the copy of separate ones are the same [2F, C] operand.
      for (size_t i = 0; i < got.size(); ++i) CHECK(torch::equal(got[i], copied[i]));
    }
  }
}

TEST_CASE("fused QKV rotary equals narrow, rotary and contiguous forward and backward") {
  const int64_t B = 2, T = 100, H = 8, K = 2;
  const loom::Batch b = loom::test::make_packed_batch({{60, 40}, {100}}, T, 1000, 75).to(cuda());
  // D = 128: bf16 takes the 16-byte rotary kernel; D = 12 (half 6) the element-wise one. v's rows
  // move 16 bytes at a time but at D = 10 in bf16 (40 bytes a row: 4 at a time).
  for (int64_t D : {128, 12, 10}) {
    const loom::PackedContext ctx = loom::make_packed_context(b, D, 10000.0);
    const torch::Tensor cos = ctx.cos.squeeze(2).narrow(-1, 0, D / 2), sin = ctx.sin.squeeze(2).narrow(-1, 0, D / 2);
    for (auto dtype : {torch::kBFloat16, torch::kFloat32}) {
      for (bool use_v : {true, false}) {
        INFO("D " << D << " dtype " << dtype << " v used " << use_v);
        torch::manual_seed(76);
        const auto opt = torch::TensorOptions().device(cuda()).dtype(dtype);
        const torch::Tensor x = torch::randn({B, T, (H + 2 * K) * D}, opt);
        const torch::Tensor uq = torch::randn({B, T, H, D}, opt), uk = torch::randn({B, T, K, D}, opt);
        const torch::Tensor uv = torch::randn({B, T, K, D}, opt);
        const auto loss = [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
          torch::Tensor l = (q.to(torch::kFloat32) * uq.to(torch::kFloat32)).sum() +
                            (k.to(torch::kFloat32) * uk.to(torch::kFloat32)).sum();
          return use_v ? l + (v.to(torch::kFloat32) * uv.to(torch::kFloat32)).sum() : l;
        };
        REQUIRE(loom::fused_qkv_rotary_applies(x));
        const torch::Tensor qkv = x.clone().requires_grad_(true);
        const std::vector<torch::Tensor> r = loom::fused_qkv_rotary(qkv, H, K, cos, sin);
        loss(r[0], r[1], r[2]).backward();
        const torch::Tensor qkv32 = x.to(torch::kFloat32).requires_grad_(true);
        const torch::Tensor q = loom::rotary_reference(qkv32.narrow(-1, 0, H * D).view({B, T, H, D}), cos, sin);
        const torch::Tensor k = loom::rotary_reference(qkv32.narrow(-1, H * D, K * D).view({B, T, K, D}), cos, sin);
        const torch::Tensor v = qkv32.narrow(-1, (H + K) * D, K * D).view({B, T, K, D});
        loss(q, k, v).backward();
        CHECK((r[0].is_contiguous() && r[1].is_contiguous() && r[2].is_contiguous()));
        CHECK(r[0].sizes() == q.sizes());
        CHECK(r[1].sizes() == k.sizes());
        CHECK(rel_err(r[0], q) < tol(dtype));
        CHECK(rel_err(r[1], k) < tol(dtype));
        CHECK(torch::equal(r[2], x.narrow(-1, (H + K) * D, K * D).view({B, T, K, D})));
        CHECK(rel_err(qkv.grad(), qkv32.grad()) < tol(dtype));
        // v is copied out and its gradient copied back, bit for bit (the rows are strided in qkv).
        const torch::Tensor dv = qkv.grad().narrow(-1, (H + K) * D, K * D).reshape({B, T, K, D});
        if (use_v) CHECK(torch::equal(dv, uv));
        if (!use_v) CHECK(dv.abs().sum().item<double>() == 0.0);
      }
    }
  }
}
