// Flash varlen attention (trainer/kernels/flash_attention.h) on the GPU against attention computed one
// document at a time in fp32, and against attention.h's masked path. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>

#include "attention.h"
#include "attention_select.h"
#include "flash_attention.h"
#include "gpu_util.h"

namespace {

using loom::test::cuda;
using loom::test::rel_err;

// Causal attention over each segment alone, fp32, k/v heads shared by groups of H/K query heads.
torch::Tensor per_document_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const std::vector<int32_t>& cu) {
  const int64_t H = q.size(1), K = k.size(1), D = q.size(2);
  std::vector<torch::Tensor> outs;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int64_t a = cu[s], n = cu[s + 1] - cu[s];
    const torch::Tensor qs = q.narrow(0, a, n).transpose(0, 1);                              // [H, n, D]
    const torch::Tensor ks = k.narrow(0, a, n).repeat_interleave(H / K, 1).transpose(0, 1);  // [H, n, D]
    const torch::Tensor vs = v.narrow(0, a, n).repeat_interleave(H / K, 1).transpose(0, 1);
    torch::Tensor scores = torch::matmul(qs, ks.transpose(1, 2)) / std::sqrt(double(D));
    const torch::Tensor future = torch::ones({n, n}, torch::dtype(torch::kBool).device(q.device())).triu(1);
    scores = scores.masked_fill(future, -INFINITY);
    outs.push_back(torch::matmul(torch::softmax(scores, -1), vs).transpose(0, 1));  // [n, H, D]
  }
  return torch::cat(outs, 0);
}

}  // namespace

TEST_CASE("flash varlen attention equals per-document attention forward and backward") {
  // Two rows of 512 tokens; documents of 1, 99, 412 | 188, 1, 323 tokens (a row boundary at 512).
  const std::vector<int32_t> cu{0, 1, 100, 512, 700, 701, 1024};
  const int64_t Tok = 1024, H = 8, K = 2;
  for (int64_t D : {64, 128}) {
    INFO("head dim " << D);
    torch::manual_seed(7);
    const auto bf = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
    const torch::Tensor q = torch::randn({Tok, H, D}, bf).requires_grad_(true);
    const torch::Tensor k = torch::randn({Tok, K, D}, bf).requires_grad_(true);
    const torch::Tensor v = torch::randn({Tok, K, D}, bf).requires_grad_(true);
    const torch::Tensor cu_t = torch::tensor(cu, torch::kInt32).to(cuda());
    const torch::Tensor out = loom::flash_varlen_attention(q, k, v, cu_t, 412, 1.0 / std::sqrt(double(D)));
    REQUIRE(out.sizes() == q.sizes());
    REQUIRE(out.scalar_type() == torch::kBFloat16);

    const torch::Tensor qf = q.detach().to(torch::kFloat32).requires_grad_(true);
    const torch::Tensor kf = k.detach().to(torch::kFloat32).requires_grad_(true);
    const torch::Tensor vf = v.detach().to(torch::kFloat32).requires_grad_(true);
    const torch::Tensor ref = per_document_attention(qf, kf, vf, cu);
    // bf16 output: 8 significant bits, so ~0.4% of the scale per rounding.
    CHECK(rel_err(out, ref) < 1e-2);

    const torch::Tensor up = torch::randn({Tok, H, D}, bf);
    out.backward(up);
    ref.backward(up.to(torch::kFloat32));
    CHECK(rel_err(q.grad(), qf.grad()) < 2e-2);
    CHECK(rel_err(k.grad(), kf.grad()) < 2e-2);
    CHECK(rel_err(v.grad(), vf.grad()) < 2e-2);
  }
}

TEST_CASE("packed attention through flash equals the masked path on every real token") {
  const loom::Batch b = loom::test::make_packed_batch({{100, 28, 3}, {64, 64, 100}}, 256, 1000, 11).to(cuda());
  const int64_t B = 2, T = 256, H = 4, K = 4, D = 64;
  const loom::PackedContext ctx = loom::make_packed_context(b, D, 10000.0);
  torch::manual_seed(12);
  const auto bf = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  const torch::Tensor q = torch::randn({B, T, H, D}, bf), k = torch::randn({B, T, K, D}, bf),
                      v = torch::randn({B, T, K, D}, bf);
  loom::set_varlen_attention({});
  const torch::Tensor masked = loom::masked_attention(q.to(torch::kFloat32), k.to(torch::kFloat32),
                                                      v.to(torch::kFloat32), ctx.mask);
  REQUIRE(loom::select_attention(cuda(), torch::kBFloat16, D) == loom::AttentionKernel::kFlashVarlen);
  const torch::Tensor flash = loom::packed_attention(q, k, v, ctx);
  loom::set_varlen_attention({});
  const torch::Tensor real = (b.segments >= 0).unsqueeze(-1).unsqueeze(-1);  // padding differs by design
  CHECK(rel_err(flash * real, masked * real) < 1e-2);
}

TEST_CASE("select_attention takes flash for bf16 on CUDA and the masked path for fp32 or CPU") {
  CHECK(loom::select_attention(cuda(), torch::kBFloat16, 128) == loom::AttentionKernel::kFlashVarlen);
  std::string why;
  CHECK_FALSE(loom::flash_attention_supported(cuda(), torch::kFloat32, 128, &why));
  CHECK(why == "activations are Float, flash attention takes bf16 or fp16");
  CHECK(loom::select_attention(cuda(), torch::kFloat32, 128) == loom::AttentionKernel::kMasked);
  CHECK(loom::select_attention(torch::kCPU, torch::kBFloat16, 128) == loom::AttentionKernel::kMasked);
  CHECK_FALSE(loom::flash_attention_supported(torch::kCPU, torch::kBFloat16, 128, &why));
  CHECK(why == "the device is cpu, not CUDA");
}
