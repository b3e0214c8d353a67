#include "evaluator.h"

#include <cmath>
#include <memory>

#include "communicator.h"
#include "loom/progress.h"
#include "loss.h"

namespace loom {

std::vector<EvalResult> evaluate(InternLM& model, const ValidationSets& sets, const torch::Device& device,
                                 Communicator* comm, bool show_progress) {
  torch::NoGradGuard no_grad;
  std::unique_ptr<Progress> progress;
  if (show_progress) {
    uint64_t batches = 0;
    for (size_t s = 0; s < sets.num_sets(); ++s) batches += static_cast<uint64_t>(sets.num_micro_batches(s));
    progress = std::make_unique<Progress>("validation", batches, "batches");
  }
  const bool was_training = model->is_training();
  model->eval();
  std::vector<EvalResult> out;
  for (size_t s = 0; s < sets.num_sets(); ++s) {
    double loss_sum = 0;
    int64_t tokens = 0, correct = 0;
    for (int64_t k = 0; k < sets.num_micro_batches(s); ++k) {
      Batch b = sets.micro_batch(s, k).to(device);
      LossResult r = compute_loss(model->forward(b), b, /*label_smoothing=*/0.0);
      loss_sum += r.loss_sum.item<double>();
      tokens += r.tokens.item<int64_t>();
      correct += r.correct.item<int64_t>();
      if (progress) progress->add(1);
    }
    if (comm && comm->distributed()) {
      torch::Tensor v = torch::tensor({loss_sum, static_cast<double>(tokens), static_cast<double>(correct)},
                                      torch::kFloat64)
                            .to(comm->device());
      comm->all_reduce(v);
      v = v.cpu();
      loss_sum = v[0].item<double>();
      tokens = static_cast<int64_t>(v[1].item<double>());
      correct = static_cast<int64_t>(v[2].item<double>());
    }
    EvalResult e;
    e.name = sets.name(s);
    e.tokens = tokens;
    e.loss = tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
    e.acc = tokens ? static_cast<double>(correct) / static_cast<double>(tokens) : 0.0;
    e.perplexity = std::exp(e.loss);
    out.push_back(e);
  }
  if (progress) progress->finish();
  if (was_training) model->train();
  return out;
}

}  // namespace loom
