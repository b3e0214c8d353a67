// Chunked cross entropy on the GPU with a bf16 head against the plain fp32 loss; the fused cross
// entropy kernel alone against float64. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>

#include "chunked_loss.h"
#include "fused_ops.h"
#include "gpu_util.h"
#include "loss.h"

using loom::test::cuda;
using loom::test::rel_err;

TEST_CASE("chunked loss on CUDA with a bf16 head matches the plain fp32 loss over a 103168 vocab") {
  torch::manual_seed(21);
  const int64_t N = 3000, C = 256, V = 103168;
  const auto f32 = torch::TensorOptions().device(cuda()).dtype(torch::kFloat32);
  const torch::Tensor hidden = torch::randn({N, C}, f32);
  const torch::Tensor weight = (torch::randn({V, C}, f32) * 0.05).to(torch::kBFloat16);
  torch::Tensor labels = torch::randint(0, V, {N}, f32.dtype(torch::kLong));
  labels.index_put_({torch::arange(0, N, 7, f32.dtype(torch::kLong))}, loom::kIgnoreIndex);

  torch::Tensor h1 = hidden.clone().requires_grad_(true);
  torch::Tensor w1 = weight.to(torch::kFloat32).requires_grad_(true);
  namespace F = torch::nn::functional;
  const torch::Tensor ref = F::cross_entropy(
      torch::matmul(h1, w1.t()), labels,
      F::CrossEntropyFuncOptions().reduction(torch::kNone).ignore_index(loom::kIgnoreIndex).label_smoothing(0.1));
  ref.sum().backward();

  torch::Tensor h2 = hidden.clone().requires_grad_(true);
  torch::Tensor w2 = weight.clone().requires_grad_(true);
  loom::ChunkedLossOptions o;
  o.chunk_tokens = 1024;
  o.label_smoothing = 0.1;
  const loom::ChunkedLossOutput got = loom::chunked_cross_entropy(h2, w2, labels, o);
  got.token_loss.sum().backward();
  CHECK(rel_err(got.token_loss, ref) < 1e-2);
  CHECK(rel_err(h2.grad(), h1.grad()) < 2e-2);
  CHECK(rel_err(w2.grad(), w1.grad()) < 2e-2);
  CHECK(w2.grad().scalar_type() == torch::kBFloat16);
}

TEST_CASE("compute_chunked_loss with a bf16 head on CUDA (fused cross entropy kernel) matches the fp32 loss") {
  torch::manual_seed(22);
  const int64_t B = 2, T = 1500, C = 256, V = 103168;
  const auto f32 = torch::TensorOptions().device(cuda()).dtype(torch::kFloat32);
  const torch::Tensor hidden = torch::randn({B, T, C}, f32);
  const torch::Tensor weight = (torch::randn({V, C}, f32) * 0.05).to(torch::kBFloat16);
  REQUIRE(loom::fused_cross_entropy_applies(torch::empty({2, V}, f32.dtype(torch::kBFloat16))));
  loom::Batch b;
  b.labels = torch::randint(0, V, {B, T}, f32.dtype(torch::kLong));
  b.labels.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, 100)}, loom::kIgnoreIndex);
  b.dataset_ids = torch::tensor({0, 1}, f32.dtype(torch::kLong));
  for (double eps : {0.0, 0.1}) {
    INFO("eps " << eps);
    torch::Tensor h1 = hidden.clone().requires_grad_(true), w1 = weight.to(torch::kFloat32).requires_grad_(true);
    torch::Tensor h2 = hidden.clone().requires_grad_(true), w2 = weight.clone().requires_grad_(true);
    const loom::LossResult want = loom::compute_loss(torch::matmul(h1, w1.t()), b, eps, 2);
    const loom::LossResult got = loom::compute_chunked_loss(h2, w2, b, eps, 2, 1024);
    want.loss_sum.backward();
    got.loss_sum.backward();
    const double n = static_cast<double>(want.tokens.item<int64_t>());
    CHECK(got.tokens.item<int64_t>() == B * (T - 100));
    CHECK(std::abs(got.loss_sum.item<double>() - want.loss_sum.item<double>()) / n < 2e-3);  // per-token loss
    CHECK(std::abs(got.correct.item<int64_t>() - want.correct.item<int64_t>()) <= 2);  // bf16 ties may flip
    CHECK(rel_err(got.dataset_loss_sum, want.dataset_loss_sum) < 2e-3);
    CHECK(rel_err(h2.grad(), h1.grad()) < 2e-2);
    CHECK(rel_err(w2.grad(), w1.grad()) < 2e-2);
    // Ignored tokens: no gradient at all.
    CHECK(h2.grad().narrow(1, 0, 100).abs().sum().item<double>() == 0.0);
  }
}

TEST_CASE("the fused cross entropy kernel against float64: loss, lse, argmax and the gradient in place") {
  // V 103168: the row stays in shared memory (206 KB fit an H100's block); V 131072: it does not
  // (256 KB), the row is read twice; V 8: one 16-byte load, by the first thread alone.
  for (const int64_t V : {int64_t{103168}, int64_t{131072}, int64_t{8}}) {
    INFO("V " << V);
    torch::manual_seed(23 + V);
    const int64_t rows = 97;
    const auto bf16 = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
    torch::Tensor host = (torch::randn({rows, V}) * 3).to(torch::kBFloat16);
    // Rows 1 and 2: two equal maxima, at a and b > a; the argmax is the first (as torch's).
    const int64_t a = V / 3, b = 2 * V / 3;
    for (const int64_t r : {1, 2}) {
      host[r][a] = 20.0;
      host[r][b] = 20.0;
    }
    torch::Tensor label_host = torch::randint(0, V, {rows}, torch::kLong);
    // Every third row from 4 on labelled with its argmax: `correct` is true there.
    const torch::Tensor argmax_rows = torch::arange(4, rows, 3, torch::kLong);
    label_host.index_put_({argmax_rows}, host.to(torch::kFloat64).argmax(1).index({argmax_rows}));
    label_host[1] = a;
    label_host[2] = b;
    label_host.index_put_({torch::arange(0, rows, 5, torch::kLong)}, loom::kIgnoreIndex);
    const torch::Tensor logits = host.to(cuda()), labels = label_host.to(cuda());
    const double eps = 0.1, scale = 0.25;
    torch::Tensor grad = logits.clone();
    const torch::Tensor loss = torch::empty({rows}, bf16.dtype(torch::kFloat32)), lse = torch::empty_like(loss),
                        correct = torch::empty({rows}, bf16.dtype(torch::kBool));
    loom::fused_cross_entropy_(grad, labels, loom::kIgnoreIndex, eps, scale, loss, lse, correct);

    const torch::Tensor x = logits.to(torch::kFloat64).cpu(), y = labels.cpu();
    const torch::Tensor valid = y.ne(loom::kIgnoreIndex), safe = torch::where(valid, y, torch::zeros_like(y));
    const torch::Tensor want_lse = torch::logsumexp(x, 1);
    const torch::Tensor nll = want_lse - x.gather(1, safe.unsqueeze(1)).squeeze(1);
    const torch::Tensor smooth = want_lse - x.mean(1);
    const torch::Tensor want_loss = torch::where(valid, (1 - eps) * nll + eps * smooth, torch::zeros_like(nll));
    CHECK((lse.cpu().to(torch::kFloat64) - want_lse).abs().max().item<double>() < 1e-4);
    CHECK((loss.cpu().to(torch::kFloat64) - want_loss).abs().max().item<double>() < 1e-4);
    // argmax of the bf16 values, the first on ties (as torch's).
    CHECK(torch::equal(correct.cpu(), valid.logical_and(x.argmax(1).eq(y))));
    CHECK(correct[1].item<bool>());
    CHECK_FALSE(correct[2].item<bool>());
    CHECK(correct.sum().item<int64_t>() >= 20);  // the argmax rows that are not ignored, and row 1
    // scale * (softmax - target), target 1 - eps at the label plus eps / V; ignored rows zero.
    const torch::Tensor target = torch::full({rows, V}, eps / static_cast<double>(V), torch::kFloat64)
                                     .scatter_add_(1, safe.unsqueeze(1), torch::full({rows, 1}, 1 - eps, torch::kFloat64));
    const torch::Tensor p = torch::softmax(x, 1), live = valid.unsqueeze(1);
    const torch::Tensor want = torch::where(live, (p - target) * scale, torch::zeros_like(p));
    const torch::Tensor terms = torch::where(live, (p + target) * scale, torch::zeros_like(p));
    const torch::Tensor got = grad.cpu().to(torch::kFloat64);
    // One rounding to bf16 (2^-8 of the value) after fp32 exp and lse: within 2^-12 of the terms
    // the difference is made of (where p and the target nearly cancel, more than of the value).
    CHECK(((got - want).abs() <= want.abs() * std::ldexp(1.0, -8) + terms * std::ldexp(1.0, -12)).all().item<bool>());
    CHECK(got.index({valid.logical_not()}).abs().sum().item<double>() == 0.0);
  }
}
