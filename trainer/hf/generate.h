// Text generation from a loom model, for a quick look at what a checkpoint has learned:
// greedy (temperature 0) or temperature + top-p (nucleus) sampling from a seeded RNG, with a KV
// cache (kv_cache.h), stopping at eos. `loom-train generate` (run_generate) wraps it with the
// checkpoint/HF loading and SentencePiece encoding and decoding (spm_encoder.h, hf_tokenizer.h: loom's
// own, as loom-train cannot link libsentencepiece).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model.h"

namespace loom {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy (argmax, lowest id on ties)
  double top_p = 1.0;        // keep the smallest set of most likely tokens whose mass reaches top_p
  uint64_t seed = 0;
  int64_t eos_id = -1;       // stop after generating it (-1: never)
  bool use_cache = true;     // false: recompute the full forward every step (the reference path)
  void validate() const;     // throws loom::UsageError naming the option out of its range
};

// Picks the next token from fp32 logits [V]. Deterministic for a given seed: the uniform draw is
// built from std::mt19937_64's raw bits, so every platform draws the same tokens.
class TokenSampler {
 public:
  explicit TokenSampler(const GenerateOptions& o);
  int64_t next(const torch::Tensor& logits);

 private:
  GenerateOptions o_;
  std::mt19937_64 rng_;
};

struct Generation {
  std::vector<int64_t> tokens;  // the new tokens (eos included when it stopped there)
  bool stopped_at_eos = false;
  torch::Tensor prompt_logits;  // [P, V] fp32 logits of the prompt positions (from the first step)
};

// Generates from prompt ids (at least one) with model in eval mode, under no_grad.
Generation generate(InternLMImpl& model, const std::vector<int64_t>& prompt, const GenerateOptions& o);

// `loom-train generate (--checkpoint DIR | --hf DIR) (--prompt TEXT | --prompt-ids 1,2,3) [...]`; args without
// the subcommand.
// Returns the process exit code (0; --help too); throws loom::Error on bad input.
int run_generate(const std::vector<std::string>& args);

}  // namespace loom
