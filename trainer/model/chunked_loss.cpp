#include "chunked_loss.h"

#include <algorithm>

#include "fused_ops.h"
#include "loom/error.h"
#include "weight_grad.h"

namespace loom {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Logits and softmax are computed in fp32 (fp64 when the weight is fp64, so tests can compare
// exactly); the matmuls run in the weight's dtype, as an nn.Linear head would.
torch::Dtype accumulate_dtype(const torch::Tensor& weight) {
  return weight.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

int64_t resolve_chunk(int64_t chunk_tokens, int64_t vocab) {
  if (chunk_tokens > 0) return chunk_tokens;
  return std::max<int64_t>(1, ChunkedLossOptions::kChunkBytes / (vocab * 4));
}

// One chunk's logits [n, V] in the accumulate dtype.
torch::Tensor chunk_logits(const torch::Tensor& hidden, const torch::Tensor& weight, int64_t start, int64_t n) {
  const torch::Tensor h = hidden.narrow(0, start, n).to(weight.scalar_type());
  return torch::matmul(h, weight.t()).to(accumulate_dtype(weight));
}

// One chunk's loss terms from its logits [n, V] (labels y, valid mask v).
struct ChunkLoss {
  torch::Tensor lse, loss, correct;
};
ChunkLoss chunk_loss(const torch::Tensor& logits, const torch::Tensor& y, const torch::Tensor& v, double eps) {
  ChunkLoss c;
  c.lse = logits.logsumexp(1);
  torch::Tensor tl = c.lse - logits.gather(1, y.unsqueeze(1)).squeeze(1);
  // -mean_c log p[c] = lse - mean_c logits[c]
  if (eps > 0) tl = (1.0 - eps) * tl + eps * (c.lse - logits.mean(1));
  c.loss = torch::where(v, tl, torch::zeros_like(tl));
  c.correct = (logits.argmax(1) == y) & v;
  return c;
}

// Turns logits [n, V] in place into g * d(loss)/d(logits) = g * (softmax - target), where the
// target puts 1 - eps on the label and eps / V everywhere. g [n] is 0 on ignored tokens.
void logits_to_grad_(torch::Tensor& logits, const torch::Tensor& lse, const torch::Tensor& g, const torch::Tensor& y,
                     double eps) {
  const torch::Tensor gc = g.unsqueeze(1);
  logits.sub_(lse.unsqueeze(1)).exp_().mul_(gc);
  if (eps > 0) logits.sub_(gc * (eps / static_cast<double>(logits.size(1))));
  logits.scatter_add_(1, y.unsqueeze(1), gc * -(1.0 - eps));
}

// d(loss)/d(logits) of rows [s, s + n) into the gradients: grad_hidden rows (hidden's dtype) and
// grad_weight (accumulated in fp32/fp64 even for a bf16 head; the first chunk, s = 0, writes it:
// it need not be zeroed).
void backprop_chunk(const torch::Tensor& d, const torch::Tensor& hidden, const torch::Tensor& weight, int64_t s,
                    int64_t n, torch::Tensor& grad_hidden, torch::Tensor& grad_weight) {
  const torch::Tensor dw = d.to(weight.scalar_type());
  grad_hidden.narrow(0, s, n).copy_(torch::matmul(dw, weight));
  const torch::Tensor h = hidden.narrow(0, s, n).to(weight.scalar_type());
  if (weight.scalar_type() == grad_weight.scalar_type()) {
    if (s == 0)
      torch::mm_out(grad_weight, dw.t(), h);
    else
      grad_weight.addmm_(dw.t(), h);
  } else if (s == 0) {
    grad_weight.copy_(torch::matmul(dw.t(), h));
  } else {
    grad_weight.add_(torch::matmul(dw.t(), h).to(grad_weight.scalar_type()));
  }
}

// An uninitialised [V, C] weight gradient when chunks will write it (backprop_chunk), zeros when
// there are no rows.
torch::Tensor weight_grad_buffer(const torch::Tensor& weight, int64_t rows, torch::Dtype dtype) {
  return rows > 0 ? torch::empty(weight.sizes(), weight.options().dtype(dtype))
                  : torch::zeros(weight.sizes(), weight.options().dtype(dtype));
}

struct Labels {
  torch::Tensor valid, safe;  // labels != ignore; labels with ignored ones replaced by class 0
};
Labels split_labels(const torch::Tensor& labels) {
  Labels l;
  l.valid = labels != kIgnoreIndex;
  l.safe = torch::where(l.valid, labels, torch::zeros_like(labels));
  return l;
}

// Per-token losses, differentiable: backward recomputes each chunk's logits (any upstream
// gradient per token).
class ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  // Returns {token_loss [N], correct [N] bool}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& labels, int64_t chunk, double eps) {
    const int64_t N = hidden.size(0);
    const auto acc = hidden.options().dtype(accumulate_dtype(weight));
    const Labels lab = split_labels(labels);
    torch::Tensor lse = torch::empty({N}, acc);
    torch::Tensor loss = torch::empty({N}, acc);
    torch::Tensor correct = torch::empty({N}, hidden.options().dtype(torch::kBool));
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      const ChunkLoss c = chunk_loss(chunk_logits(hidden, weight, s, n), lab.safe.narrow(0, s, n),
                                     lab.valid.narrow(0, s, n), eps);
      lse.narrow(0, s, n).copy_(c.lse);
      loss.narrow(0, s, n).copy_(c.loss);
      correct.narrow(0, s, n).copy_(c.correct);
    }
    ctx->save_for_backward({hidden, weight, labels, lse});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["eps"] = eps;
    ctx->mark_non_differentiable({correct});
    return {loss, correct};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &labels = saved[2], &lse = saved[3];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const double eps = ctx->saved_data["eps"].toDouble();
    const int64_t N = hidden.size(0);
    const torch::Dtype acc = accumulate_dtype(weight);
    if (!grads[0].defined()) return {torch::zeros_like(hidden), torch::zeros_like(weight), {}, {}, {}};
    const Labels lab = split_labels(labels);
    const torch::Tensor g = grads[0].to(acc) * lab.valid.to(acc);  // ignored tokens carry no gradient
    torch::Tensor grad_hidden = torch::empty_like(hidden);
    torch::Tensor grad_weight = weight_grad_buffer(weight, N, acc);
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      torch::Tensor d = chunk_logits(hidden, weight, s, n);
      logits_to_grad_(d, lse.narrow(0, s, n), g.narrow(0, s, n), lab.safe.narrow(0, s, n), eps);
      backprop_chunk(d, hidden, weight, s, n, grad_hidden, grad_weight);
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), {}, {}, {}};
  }
};

// The summed loss, differentiable: the gradients for an upstream gradient of 1 are computed in
// the forward while each chunk's logits exist (no recompute: saves the 2 V C FLOPs per token of a
// second head matmul); backward scales them by the upstream scalar on the device.
class ChunkedCrossEntropySum : public torch::autograd::Function<ChunkedCrossEntropySum> {
 public:
  // Returns {loss_sum [], token_loss [N] (detached), correct [N] bool}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& labels, int64_t chunk, double eps) {
    const int64_t N = hidden.size(0);
    const torch::Dtype acc = accumulate_dtype(weight);
    const Labels lab = split_labels(labels);
    const torch::Tensor g = lab.valid.to(acc);
    torch::Tensor loss = torch::empty({N}, hidden.options().dtype(acc));
    torch::Tensor correct = torch::empty({N}, hidden.options().dtype(torch::kBool));
    torch::Tensor grad_hidden = torch::empty_like(hidden);
    // CUDA + bf16 head: the head's gradient accumulates in bf16 through addmm_ (cuBLAS adds each
    // chunk in fp32 and rounds once); an fp32 accumulator cost a cast and an fp32 add of [V, C] per
    // chunk (3.5 ms of a 1b step on an H200), and each chunk's product was rounded to bf16 anyway.
    const bool bf16_cuda = weight.scalar_type() == torch::kBFloat16 && hidden.is_cuda();
    torch::Tensor grad_weight = weight_grad_buffer(weight, N, bf16_cuda ? weight.scalar_type() : acc);
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t n = std::min(chunk, N - s);
      // CUDA + bf16 head: bf16 logits, and one kernel for loss, accuracy and gradient (fused_ops.h).
      torch::Tensor bf16_logits = weight.scalar_type() == torch::kBFloat16 && hidden.is_cuda()
                                      ? torch::matmul(hidden.narrow(0, s, n).to(weight.scalar_type()), weight.t())
                                      : torch::Tensor();
      if (bf16_logits.defined() && fused_cross_entropy_applies(bf16_logits)) {
        fused_cross_entropy_(bf16_logits, labels.narrow(0, s, n), kIgnoreIndex, eps, 1.0, loss.narrow(0, s, n),
                             torch::empty({n}, loss.options()), correct.narrow(0, s, n));
        backprop_chunk(bf16_logits, hidden, weight, s, n, grad_hidden, grad_weight);
        continue;
      }
      torch::Tensor logits = chunk_logits(hidden, weight, s, n);
      const torch::Tensor y = lab.safe.narrow(0, s, n);
      const ChunkLoss c = chunk_loss(logits, y, lab.valid.narrow(0, s, n), eps);
      loss.narrow(0, s, n).copy_(c.loss);
      correct.narrow(0, s, n).copy_(c.correct);
      logits_to_grad_(logits, c.lse, g.narrow(0, s, n), y, eps);
      backprop_chunk(logits, hidden, weight, s, n, grad_hidden, grad_weight);
    }
    ctx->save_for_backward({grad_hidden, grad_weight, weight});
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->mark_non_differentiable({loss, correct});
    return {loss.sum(), loss, correct};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& up = grads[0];
    if (!up.defined()) return {torch::zeros_like(saved[0]), torch::zeros_like(saved[1]), {}, {}, {}};
    const auto weight_dtype = static_cast<torch::Dtype>(ctx->saved_data["weight_dtype"].toInt());
    const torch::Tensor &gw = saved[1], &weight = saved[2];
    const torch::Tensor scale = up.to(torch::kFloat32);
    if (gw.scalar_type() == weight_dtype && fused_scale_add_applies(gw, gw, scale)) {
      // CUDA bf16: scaled and, from a step's second micro-batch on, added into the head's gradient
      // in one pass (weight_grad.h).
      const torch::Tensor grad_weight = weight_gradient(
          weight, [&](torch::Tensor out, bool add) { fused_scale_add_(out, gw, scale, add); });
      return {saved[0] * up.to(saved[0].scalar_type()), grad_weight, {}, {}, {}};
    }
    // A bf16 accumulator is scaled in the upstream gradient's precision (1 / tokens is no bf16 number).
    const torch::Tensor grad_weight = gw.scalar_type() == torch::kBFloat16 && up.scalar_type() != gw.scalar_type()
                                          ? (gw.to(up.scalar_type()) * up).to(weight_dtype)
                                          : (gw * up.to(gw.scalar_type())).to(weight_dtype);
    return {saved[0] * up.to(saved[0].scalar_type()), grad_weight, {}, {}, {}};
  }
};

// Labels must be classes or the ignore index; checked where that costs no device read-back.
void check_labels(const torch::Tensor& labels, int64_t V) {
  if (!labels.device().is_cpu()) return;
  const torch::Tensor bad = (labels != kIgnoreIndex) & ((labels < 0) | (labels >= V));
  if (bad.any().item<bool>()) {
    const int64_t at = bad.nonzero()[0][0].item<int64_t>();
    LOOM_FAIL("label ", labels[at].item<int64_t>(), " at token ", at, " is neither a class in [0, ", V,
              ") nor the ignore index ", kIgnoreIndex);
  }
}

}  // namespace

ChunkedLossOutput chunked_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                        const torch::Tensor& labels, const ChunkedLossOptions& options) {
  LOOM_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
             "chunked loss needs hidden [N, C] and head weight [V, C], got ", hidden.sizes(), " and ",
             weight.sizes());
  LOOM_CHECK(labels.dim() == 1 && labels.size(0) == hidden.size(0), "labels ", labels.sizes(),
             " do not match hidden ", hidden.sizes());
  LOOM_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1,
             "loss.label_smoothing must be in [0, 1], got ", options.label_smoothing);
  const int64_t V = weight.size(0);
  const torch::Tensor lab = labels.to(torch::kLong);
  check_labels(lab, V);
  const variable_list out = ChunkedCrossEntropy::apply(hidden, weight, lab, resolve_chunk(options.chunk_tokens, V),
                                                       options.label_smoothing);
  return {out[0], out[1]};
}

LossResult compute_chunked_loss(const torch::Tensor& hidden, const torch::Tensor& weight, const Batch& b,
                                double label_smoothing, int64_t num_datasets, int64_t chunk_tokens) {
  LOOM_CHECK(hidden.dim() == 3, "hidden states must be [B, T, C], got ", hidden.sizes());
  LOOM_CHECK(b.labels.sizes() == hidden.sizes().slice(0, 2), "labels ", b.labels.sizes(),
             " do not match hidden states ", hidden.sizes());
  LOOM_CHECK(num_datasets > 0, "compute_chunked_loss needs num_datasets > 0, got ", num_datasets);
  const int64_t B = hidden.size(0), T = hidden.size(1);
  const torch::Tensor h = hidden.reshape({B * T, hidden.size(2)});
  const torch::Tensor labels = b.labels.reshape({B * T}).to(torch::kLong);
  check_labels(labels, weight.size(0));
  const int64_t chunk = resolve_chunk(chunk_tokens, weight.size(0));
  LOOM_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "loss.label_smoothing must be in [0, 1], got ",
             label_smoothing);
  torch::Tensor loss_sum, token_loss, correct;
  if (torch::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad())) {
    const variable_list out = ChunkedCrossEntropySum::apply(h, weight, labels, chunk, label_smoothing);
    loss_sum = out[0];
    token_loss = out[1];
    correct = out[2];
  } else {
    const variable_list out = ChunkedCrossEntropy::apply(h, weight, labels, chunk, label_smoothing);
    token_loss = out[0];
    correct = out[1];
    loss_sum = token_loss.sum();
  }

  LossResult r;
  const torch::Tensor row_loss = token_loss.detach().to(torch::kFloat32).view({B, T}).sum(1);  // [B]
  const torch::Tensor row_tokens = (b.labels != kIgnoreIndex).sum(1);
  const torch::Tensor row_correct = correct.view({B, T}).sum(1);
  r.loss_sum = loss_sum.to(torch::kFloat32);
  r.tokens = row_tokens.sum();
  r.correct = row_correct.sum();
  const torch::Tensor ids =
      b.dataset_ids.defined() ? b.dataset_ids.to(torch::kLong) : torch::zeros({B}, row_tokens.options());
  LOOM_CHECK(ids.dim() == 1 && ids.size(0) == B, "dataset_ids must be [B] = [", B, "], got ", ids.sizes());
  r.dataset_loss_sum = torch::zeros({num_datasets}, row_loss.options()).index_add(0, ids, row_loss);
  r.dataset_tokens = torch::zeros({num_datasets}, row_tokens.options()).index_add(0, ids, row_tokens);
  r.dataset_correct = torch::zeros({num_datasets}, row_tokens.options()).index_add(0, ids, row_correct);
  return r;
}

}  // namespace loom
