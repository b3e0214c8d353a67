#include "evaluator.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "communicator.h"
#include "loom/progress.h"
#include "loss.h"

namespace loom {

namespace {

// Whether any rank asks to stop (one scalar all-reduce a batch, only when someone can ask).
bool stop_agreed(const EvalOptions& o, Communicator* comm) {
  if (!o.stop) return false;
  const bool mine = o.stop();
  if (!comm || !comm->distributed()) return mine;
  return comm->all_reduce_scalar(mine ? 1.0 : 0.0, ReduceOp::kMax) > 0;
}

// The sums of one set over every rank: [loss, tokens, correct].
void all_reduce_sums(Communicator* comm, double& loss_sum, int64_t& tokens, int64_t& correct) {
  if (!comm || !comm->distributed()) return;
  torch::Tensor v = torch::tensor({loss_sum, static_cast<double>(tokens), static_cast<double>(correct)}, torch::kFloat64)
                        .to(comm->device());
  comm->all_reduce(v);
  v = v.cpu();
  loss_sum = v[0].item<double>();
  tokens = static_cast<int64_t>(v[1].item<double>());
  correct = static_cast<int64_t>(v[2].item<double>());
}

}  // namespace

Evaluation evaluate(InternLM& model, const ValidationSets& sets, const torch::Device& device, Communicator* comm,
                    const EvalOptions& o) {
  torch::NoGradGuard no_grad;
  const auto batches_of = [&](size_t s) {
    const int64_t all = sets.num_micro_batches(s);
    return o.max_micro_batches > 0 ? std::min(all, o.max_micro_batches) : all;
  };
  std::unique_ptr<Progress> progress;
  if (o.show_progress) {
    uint64_t batches = 0;
    for (size_t s = 0; s < sets.num_sets(); ++s) batches += static_cast<uint64_t>(batches_of(s));
    progress = std::make_unique<Progress>("validation", batches, "batches");
  }
  const bool was_training = model->is_training();
  model->eval();
  Evaluation out;
  for (size_t s = 0; s < sets.num_sets() && !out.interrupted; ++s) {
    double loss_sum = 0;
    int64_t tokens = 0, correct = 0;
    for (int64_t k = 0; k < batches_of(s); ++k) {
      if (stop_agreed(o, comm)) {
        out.interrupted = true;
        break;
      }
      Batch b = sets.micro_batch(s, k).to(device);
      LossResult r = compute_loss(model->forward(b), b, /*label_smoothing=*/0.0);
      loss_sum += r.loss_sum.item<double>();
      tokens += r.tokens.item<int64_t>();
      correct += r.correct.item<int64_t>();
      if (progress) progress->add(1);
    }
    if (out.interrupted) break;
    all_reduce_sums(comm, loss_sum, tokens, correct);
    EvalResult e;
    e.name = sets.name(s);
    e.tokens = tokens;
    e.loss = tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
    e.acc = tokens ? static_cast<double>(correct) / static_cast<double>(tokens) : 0.0;
    e.perplexity = std::exp(e.loss);
    out.results.push_back(e);
  }
  if (out.interrupted) out.results.clear();
  if (progress) progress->finish();
  if (was_training) model->train();
  return out;
}

}  // namespace loom
