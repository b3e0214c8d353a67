#include "loss.h"

#include "loom/error.h"

namespace loom {

LossResult compute_loss(const torch::Tensor& logits, const Batch& b, double label_smoothing,
                        int64_t num_datasets) {
  LOOM_CHECK(logits.dim() == 3, "logits must be [B, T, V], got ", logits.sizes());
  LOOM_CHECK(b.labels.sizes() == logits.sizes().slice(0, 2), "labels ", b.labels.sizes(),
             " do not match logits ", logits.sizes());
  LOOM_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "loss.label_smoothing must be in [0, 1], got ",
             label_smoothing);
  const int64_t V = logits.size(2);
  const torch::Tensor labels = b.labels;
  const torch::Tensor has_label = labels != kIgnoreIndex;
  // Labels must be classes; checked on the labelled tokens only (one reduction, no per-token loop).
  {
    const torch::Tensor bad = has_label & ((labels < 0) | (labels >= V));
    if (bad.any().item<bool>()) {
      const torch::Tensor at = bad.nonzero()[0].cpu();
      const int64_t row = at[0].item<int64_t>(), pos = at[1].item<int64_t>();
      LOOM_FAIL("label ", labels[row][pos].item<int64_t>(), " at batch row ", row, " position ", pos,
                " is neither a class in [0, ", V, ") nor the ignore index ", kIgnoreIndex);
    }
  }

  const torch::Tensor logp = torch::log_softmax(logits.to(torch::kFloat32), -1);
  const torch::Tensor safe = torch::where(has_label, labels, torch::zeros_like(labels));
  torch::Tensor per_token = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1);  // [B, T]
  if (label_smoothing > 0) {
    per_token = (1.0 - label_smoothing) * per_token - label_smoothing * logp.mean(-1);
  }
  per_token = torch::where(has_label, per_token, torch::zeros_like(per_token));
  const torch::Tensor hit = (logits.argmax(-1) == labels) & has_label;

  LossResult r;
  const torch::Tensor row_loss = per_token.sum(1);  // [B]
  const torch::Tensor row_tokens = has_label.sum(1);
  const torch::Tensor row_correct = hit.sum(1);
  r.loss_sum = row_loss.sum();
  r.tokens = row_tokens.sum();
  r.correct = row_correct.sum();

  torch::Tensor ids = b.dataset_ids.defined() ? b.dataset_ids.to(torch::kLong)
                                              : torch::zeros({logits.size(0)}, row_tokens.options());
  LOOM_CHECK(ids.dim() == 1 && ids.size(0) == logits.size(0), "dataset_ids must be [B] = [", logits.size(0),
             "], got ", ids.sizes());
  if (num_datasets <= 0) num_datasets = ids.numel() > 0 ? ids.max().item<int64_t>() + 1 : 1;
  const torch::Tensor zl = torch::zeros({num_datasets}, row_loss.options());
  const torch::Tensor zi = torch::zeros({num_datasets}, row_tokens.options());
  r.dataset_loss_sum = zl.index_add(0, ids, row_loss.detach());
  r.dataset_tokens = zi.index_add(0, ids, row_tokens);
  r.dataset_correct = zi.index_add(0, ids, row_correct);
  return r;
}

}  // namespace loom
