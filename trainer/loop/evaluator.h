// Validation: every named set of data.valid_folder, in the same order every time, without
// gradients and with dropout off. Per set: loss (token-weighted mean cross entropy, no label
// smoothing, as InternLM's validation), accuracy and perplexity = exp(loss).
#pragma once

#include <string>
#include <vector>

#include "loader.h"
#include "model.h"

namespace loom {

class Communicator;

struct EvalResult {
  std::string name;
  double loss = 0, acc = 0, perplexity = 0;
  int64_t tokens = 0;
};

// With a communicator, each rank evaluates its slice of every set and the sums are all-reduced:
// every rank returns the same results. show_progress: a progress line of this rank's batches (a
// live line on a TTY, a periodic log line otherwise).
std::vector<EvalResult> evaluate(InternLM& model, const ValidationSets& sets, const torch::Device& device,
                                 Communicator* comm = nullptr, bool show_progress = false);

}  // namespace loom
