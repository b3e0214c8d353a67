// Token-weighted cross entropy with label smoothing and an ignore index, plus accuracy.
//
// For every token t with labels[t] != kIgnoreIndex, with p = softmax(logits[t]) over V classes and
// smoothing eps:
//   loss[t] = (1 - eps) * -log p[label] + eps * mean_c(-log p[c])
// exactly torch.nn.functional.cross_entropy(logits, labels, label_smoothing=eps,
// ignore_index=-100, reduction="none"); the result is the SUM over tokens, so the caller divides
// by the token count of the whole global batch (every token weighs the same, however the tokens are
// spread over micro-batches and ranks). Accuracy: argmax(logits[t]) == label.
#pragma once

#include <torch/torch.h>

#include "batch.h"

namespace loom {

struct LossResult {
  torch::Tensor loss_sum;  // [] fp32, differentiable
  torch::Tensor tokens;    // [] int64 tokens with a label
  torch::Tensor correct;   // [] int64 of those, argmax == label
  // Per dataset (Batch::dataset_ids), detached: [num_datasets] fp32 / int64 / int64.
  torch::Tensor dataset_loss_sum, dataset_tokens, dataset_correct;
};

// logits [B, T, V] (fp32 advised), b.labels [B, T], b.dataset_ids [B] (optional: undefined ->
// per-dataset fields hold one entry). num_datasets 0 = max(dataset_ids) + 1.
LossResult compute_loss(const torch::Tensor& logits, const Batch& b, double label_smoothing,
                        int64_t num_datasets = 0);

}  // namespace loom
