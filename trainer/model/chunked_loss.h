// Cross entropy over a large vocabulary (InternLM: V = 103168) that never holds fp32 logits for
// every token at once. The head matmul and the loss run over chunks of tokens: forward keeps only
// each token's log-sum-exp; backward recomputes one chunk's logits at a time, turns them into
// d(loss)/d(logits) = g * (softmax - target) in place and multiplies straight into the gradients
// of the hidden states and of the head weight. Peak extra memory: one [chunk, V] fp32 block
// (plus its copy in the weight's dtype) instead of [B*T, V] fp32 logits, their gradient and the
// log-softmax. Same numbers as loss.h's compute_loss on the logits hidden @ weight^T.
//
// Pure LibTorch: the same code runs on CPU (where it is tested against the plain loss) and CUDA.
// No host synchronisation on CUDA: labels are not range-checked there (the loader checked the
// tokens against the vocabulary); on CPU they are, with a clear error.
#pragma once

#include <torch/torch.h>

#include "batch.h"
#include "loss.h"

namespace loom {

struct ChunkedLossOptions {
  int64_t chunk_tokens = 0;      // tokens per chunk; 0 = as many as fit kChunkBytes of fp32 logits
  double label_smoothing = 0.0;  // eps in (1 - eps) * nll + eps * mean_c(-log p[c]), as torch
  static constexpr int64_t kChunkBytes = int64_t{1} << 30;
};

struct ChunkedLossOutput {
  torch::Tensor token_loss;  // [N] fp32 (fp64 for an fp64 weight), differentiable w.r.t. hidden and
                             // weight; 0 where ignored
  torch::Tensor correct;     // [N] bool: argmax of the logits == label (false where ignored)
};

// hidden [N, C] (any float dtype; cast to the weight's dtype for the matmul), weight [V, C] (the
// head, as nn.Linear without bias), labels [N] int64 in [0, V) or kIgnoreIndex.
ChunkedLossOutput chunked_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                        const torch::Tensor& labels, const ChunkedLossOptions& options);

// loss.h's LossResult from hidden states [B, T, C] and the head weight, without logits:
// a drop-in for compute_loss(model logits, ...). num_datasets must be given (> 0): finding it
// from the data would read the device back. When gradients are wanted, the forward computes them
// for the summed loss while each chunk's logits exist (no second head matmul in backward) and the
// backward only scales them by the upstream gradient: loss_sum must be the only differentiable
// use of the result (as in the trainer: loss_sum / global token count).
LossResult compute_chunked_loss(const torch::Tensor& hidden, const torch::Tensor& weight, const Batch& b,
                                double label_smoothing, int64_t num_datasets, int64_t chunk_tokens = 0);

}  // namespace loom
