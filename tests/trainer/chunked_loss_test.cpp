// Chunked cross entropy (trainer/model/chunked_loss.h) against the plain loss: torch's own
// cross_entropy on materialised logits (fp64: to rounding; fp32/bf16: to the dtype's epsilon),
// and loss.h's compute_loss for the per-batch/per-dataset sums. Runs on CPU (label unit).
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "batch.h"
#include "chunked_loss.h"
#include "loss.h"

namespace {

namespace F = torch::nn::functional;

struct Case {
  torch::Tensor hidden, weight, labels;
};

// N tokens, C hidden, V classes; every fourth label ignored, the rest drawn uniformly.
Case make_case(int64_t N, int64_t C, int64_t V, torch::Dtype dtype, uint64_t seed) {
  torch::manual_seed(seed);
  Case c;
  c.hidden = torch::randn({N, C}, torch::dtype(dtype));
  c.weight = torch::randn({V, C}, torch::dtype(dtype)) * 0.5;
  c.labels = torch::randint(0, V, {N}, torch::kLong);
  c.labels.index_put_({torch::arange(0, N, 4)}, loom::kIgnoreIndex);
  return c;
}

// Reference: logits in full, torch's cross_entropy, autograd. Returns {token_loss, d hidden, d weight}.
std::vector<torch::Tensor> reference(const Case& c, const torch::Tensor& upstream, double eps) {
  torch::Tensor h = c.hidden.detach().clone().requires_grad_(true);
  torch::Tensor w = c.weight.detach().clone().requires_grad_(true);
  const torch::Tensor logits = torch::matmul(h, w.t());
  const torch::Tensor loss = F::cross_entropy(
      logits, c.labels,
      F::CrossEntropyFuncOptions().reduction(torch::kNone).ignore_index(loom::kIgnoreIndex).label_smoothing(eps));
  (loss * upstream).sum().backward();
  return {loss.detach(), h.grad(), w.grad()};
}

std::vector<torch::Tensor> chunked(const Case& c, const torch::Tensor& upstream, double eps, int64_t chunk,
                                   torch::Tensor* correct = nullptr) {
  torch::Tensor h = c.hidden.detach().clone().requires_grad_(true);
  torch::Tensor w = c.weight.detach().clone().requires_grad_(true);
  loom::ChunkedLossOptions o;
  o.chunk_tokens = chunk;
  o.label_smoothing = eps;
  const loom::ChunkedLossOutput out = loom::chunked_cross_entropy(h, w, c.labels, o);
  (out.token_loss * upstream).sum().backward();
  if (correct) *correct = out.correct;
  return {out.token_loss.detach(), h.grad(), w.grad()};
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("chunked loss equals torch cross_entropy in fp64 for every chunk size and smoothing") {
  const Case c = make_case(37, 16, 50, torch::kFloat64, 1);
  const torch::Tensor upstream = torch::rand({37}, torch::kFloat64) + 0.5;
  for (double eps : {0.0, 0.1}) {
    const auto ref = reference(c, upstream, eps);
    for (int64_t chunk : {1, 5, 36, 37, 1000, 0}) {
      INFO("eps " << eps << " chunk " << chunk);
      torch::Tensor correct;
      const auto got = chunked(c, upstream, eps, chunk, &correct);
      CHECK(max_abs_diff(got[0], ref[0]) < 1e-12);
      CHECK(max_abs_diff(got[1], ref[1]) < 1e-12);
      CHECK(max_abs_diff(got[2], ref[2]) < 1e-12);
      const torch::Tensor valid = c.labels != loom::kIgnoreIndex;
      const torch::Tensor want = (torch::matmul(c.hidden, c.weight.t()).argmax(1) == c.labels) & valid;
      CHECK(torch::equal(correct, want));
      // Ignored tokens: zero loss, and they contribute nothing to the hidden gradient.
      CHECK(got[0].masked_select(valid.logical_not()).abs().sum().item<double>() == 0.0);
      CHECK(got[1].index({torch::arange(0, 37, 4)}).abs().sum().item<double>() == 0.0);
    }
  }
}

TEST_CASE("chunked loss matches the plain loss in fp32 within float epsilon") {
  const Case c = make_case(300, 64, 1000, torch::kFloat32, 2);
  const torch::Tensor upstream = torch::ones({300});
  const auto ref = reference(c, upstream, 0.0);
  const auto got = chunked(c, upstream, 0.0, 64);
  // Magnitudes: loss ~ 10, logits ~ 4 * sqrt(C); fp32 rounding of sums over C and V terms.
  CHECK(max_abs_diff(got[0], ref[0]) < 1e-4);
  CHECK(max_abs_diff(got[1], ref[1]) < 1e-4);
  CHECK(max_abs_diff(got[2], ref[2]) < 1e-4);
}

TEST_CASE("chunked loss with a bf16 head stays within bf16 tolerance of the fp32 loss") {
  const Case c = make_case(200, 64, 512, torch::kFloat32, 3);
  const torch::Tensor upstream = torch::ones({200});
  const auto ref = reference(c, upstream, 0.0);
  torch::Tensor h = c.hidden.clone().requires_grad_(true);
  torch::Tensor w = c.weight.to(torch::kBFloat16).requires_grad_(true);
  loom::ChunkedLossOptions o;
  o.chunk_tokens = 48;
  const loom::ChunkedLossOutput out = loom::chunked_cross_entropy(h, w, c.labels, o);
  CHECK(out.token_loss.scalar_type() == torch::kFloat32);
  out.token_loss.sum().backward();
  CHECK(h.grad().scalar_type() == torch::kFloat32);
  CHECK(w.grad().scalar_type() == torch::kBFloat16);
  // bf16 keeps 8 significant bits: relative error ~ 2^-8 per rounding, a few roundings deep.
  const double loss_scale = ref[0].abs().max().item<double>();
  CHECK(max_abs_diff(out.token_loss, ref[0]) < 0.03 * loss_scale);
  CHECK(max_abs_diff(h.grad(), ref[1]) < 0.03 * ref[1].abs().max().item<double>());
  CHECK(max_abs_diff(w.grad(), ref[2]) < 0.03 * ref[2].abs().max().item<double>());
}

TEST_CASE("compute_chunked_loss equals compute_loss on the materialised logits") {
  torch::manual_seed(4);
  const int64_t B = 3, T = 11, C = 8, V = 40;
  loom::Batch b;
  b.labels = torch::randint(0, V, {B, T}, torch::kLong);
  b.labels.index_put_({torch::indexing::Slice(), T - 1}, loom::kIgnoreIndex);
  b.labels.index_put_({1, torch::indexing::Slice(0, 4)}, loom::kIgnoreIndex);
  b.dataset_ids = torch::tensor({1, 0, 1}, torch::kLong);
  const torch::Tensor hidden = torch::randn({B, T, C}, torch::kFloat64);
  const torch::Tensor weight = torch::randn({V, C}, torch::kFloat64);
  for (double eps : {0.0, 0.2}) {
    INFO("eps " << eps);
    const torch::Tensor h1 = hidden.clone().requires_grad_(true), w1 = weight.clone().requires_grad_(true);
    const torch::Tensor h2 = hidden.clone().requires_grad_(true), w2 = weight.clone().requires_grad_(true);
    const loom::LossResult want = loom::compute_loss(torch::matmul(h1, w1.t()), b, eps, 2);
    const loom::LossResult got = loom::compute_chunked_loss(h2, w2, b, eps, 2, 7);
    // The gradients computed in the forward (sum path), scaled by the upstream 3.
    (want.loss_sum * 3).backward();
    (got.loss_sum * 3).backward();
    CHECK(max_abs_diff(h2.grad(), h1.grad()) < 1e-5);
    CHECK(max_abs_diff(w2.grad(), w1.grad()) < 1e-5);
    CHECK(w2.grad().scalar_type() == torch::kFloat64);
    CHECK(got.loss_sum.item<double>() == Approx(want.loss_sum.item<double>()).epsilon(1e-6));
    CHECK(got.tokens.item<int64_t>() == want.tokens.item<int64_t>());
    CHECK(got.tokens.item<int64_t>() == B * T - B - 4);
    CHECK(got.correct.item<int64_t>() == want.correct.item<int64_t>());
    CHECK(torch::allclose(got.dataset_loss_sum.to(torch::kFloat64), want.dataset_loss_sum.to(torch::kFloat64),
                          1e-6, 1e-6));
    CHECK(torch::equal(got.dataset_tokens, want.dataset_tokens));
    CHECK(torch::equal(got.dataset_correct, want.dataset_correct));
  }
  // Without gradients (evaluation) the per-token path runs: same sums.
  torch::NoGradGuard no_grad;
  const loom::LossResult want = loom::compute_loss(torch::matmul(hidden, weight.t()), b, 0.1, 2);
  const loom::LossResult got = loom::compute_chunked_loss(hidden, weight, b, 0.1, 2, 5);
  CHECK(got.loss_sum.item<double>() == Approx(want.loss_sum.item<double>()).epsilon(1e-6));
  CHECK_FALSE(got.loss_sum.requires_grad());
}

TEST_CASE("chunked loss of a batch with every label ignored is zero with zero gradients") {
  Case c = make_case(10, 4, 7, torch::kFloat32, 5);
  c.labels.fill_(loom::kIgnoreIndex);
  const auto got = chunked(c, torch::ones({10}), 0.1, 3);
  CHECK(got[0].abs().sum().item<double>() == 0.0);
  CHECK(got[1].abs().sum().item<double>() == 0.0);
  CHECK(got[2].abs().sum().item<double>() == 0.0);
}

TEST_CASE("chunked loss rejects a label outside the vocabulary naming the token") {
  Case c = make_case(10, 4, 7, torch::kFloat32, 6);
  c.labels[3] = 7;
  c.labels[5] = -3;
  loom::ChunkedLossOptions o;
  REQUIRE_THROWS_WITH(loom::chunked_cross_entropy(c.hidden, c.weight, c.labels, o),
                      "label 7 at token 3 is neither a class in [0, 7) nor the ignore index -100");
  c.labels[3] = 0;
  REQUIRE_THROWS_WITH(loom::chunked_cross_entropy(c.hidden, c.weight, c.labels, o),
                      "label -3 at token 5 is neither a class in [0, 7) nor the ignore index -100");
  REQUIRE_THROWS_WITH(loom::chunked_cross_entropy(c.hidden, c.weight.t(), c.labels, o),
                      Catch::Contains("chunked loss needs hidden [N, C] and head weight [V, C], got [10, 4] and [4, 7]"));
}
