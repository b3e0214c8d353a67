// Validation: every named set of data.valid_folder, in the same order every time, without
// gradients and with dropout off. Per set: loss (token-weighted mean cross entropy, no label
// smoothing, as InternLM's validation), accuracy and perplexity = exp(loss). It can be capped
// (data.valid_micro_num, Megatron's eval-iters) and stopped between any two batches.
#pragma once

#include <functional>
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

struct EvalOptions {
  int64_t max_micro_batches = 0;  // per set (each rank's micro-batches), 0 = all
  // Asked before every batch on every rank: a stop request this rank has seen (a signal, the stop
  // file). With several ranks the answers are all-reduced, so all stop at the same batch.
  std::function<bool()> stop;
  bool show_progress = false;  // a progress line of this rank's batches (live on a TTY, else periodic)
};

struct Evaluation {
  std::vector<EvalResult> results;  // every set, or none when interrupted
  bool interrupted = false;         // a stop request ended it before its last batch
};

// With a communicator, each rank evaluates its slice of every set and the sums are all-reduced:
// every rank returns the same results.
Evaluation evaluate(InternLM& model, const ValidationSets& sets, const torch::Device& device,
                    Communicator* comm = nullptr, const EvalOptions& options = {});

}  // namespace loom
