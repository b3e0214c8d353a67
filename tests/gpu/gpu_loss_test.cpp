// Chunked cross entropy on the GPU with a bf16 head against the plain fp32 loss. Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "chunked_loss.h"
#include "gpu_util.h"

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
