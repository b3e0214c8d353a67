// loom's fused CUDA kernels (trainer/fused_ops.h) against their unfused references, forward and
// backward, in bf16 and fp32; the rotary kernel also against the model's apply_rotary. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
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

}  // namespace

TEST_CASE("fused RMSNorm equals the reference forward and backward in bf16 and fp32") {
  REQUIRE(loom::fused_kernels_available());
  for (auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    for (int64_t C : {2048, 4096, 40}) {
      INFO("dtype " << dtype << " C " << C);
      torch::manual_seed(71);
      const auto opt = torch::TensorOptions().device(cuda()).dtype(dtype);
      const torch::Tensor x = torch::randn({3, 37, C}, opt) * 3;
      const torch::Tensor w = torch::rand({C}, opt) + 0.5;
      const torch::Tensor up = torch::randn({3, 37, C}, opt);
      auto fused = [](const std::vector<torch::Tensor>& in) { return loom::fused_rmsnorm(in[0], in[1], 1e-5); };
      auto ref = [](const std::vector<torch::Tensor>& in) { return loom::rmsnorm_reference(in[0], in[1], 1e-5); };
      const auto got = grads_of(fused, {x, w}, up, false);
      const auto want = grads_of(ref, {x, w}, up, true);
      CHECK(got[0].scalar_type() == dtype);
      CHECK(rel_err(got[0], want[0]) < tol(dtype));
      CHECK(rel_err(got[1], want[1]) < tol(dtype));
      CHECK(rel_err(got[2], want[2]) < tol(dtype));
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
    const torch::Tensor a = torch::randn({257, 5632}, opt) * 2, bb = torch::randn({257, 5632}, opt);
    const torch::Tensor up = torch::randn({257, 5632}, opt);
    auto fused = [](const std::vector<torch::Tensor>& in) { return loom::fused_swiglu(in[0], in[1]); };
    auto ref = [](const std::vector<torch::Tensor>& in) { return torch::silu(in[0]) * in[1]; };
    const auto got = grads_of(fused, {a, bb}, up, false);
    const auto want = grads_of(ref, {a, bb}, up, true);
    CHECK(rel_err(got[0], want[0]) < tol(dtype));
    CHECK(rel_err(got[1], want[1]) < tol(dtype));
    CHECK(rel_err(got[2], want[2]) < tol(dtype));
  }
}
