// The INI sections the optimizer and the learning-rate schedule read, each default written once,
// as the member's initializer: config/ parses into these structs (train_keys.cpp reads the
// defaults from them) and the optimizer (fused_adamw.h) and the schedule (lr_schedule.h) take
// views of them, so no second table of defaults exists.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

// [adam]
struct AdamOptions {
  double lr = 1e-4;                // adam.lr: the peak learning rate (the schedule's base_lr)
  double beta1 = 0.9;              // adam.adam_beta1
  double beta2 = 0.95;             // adam.adam_beta2
  double eps = 1e-8;               // adam.adam_eps
  double weight_decay = 0.01;      // adam.weight_decay
  bool decay_embeddings = false;   // adam.decay_embeddings
  // adam.overlap_update: on CUDA the replicated optimizer's update runs beside the next forward
  // (optimizer.h); the weights are the same bits either way.
  bool overlap_update = true;
  // Throws loom::Error naming the key of a value out of range: lr >= 0, betas in [0, 1), eps > 0,
  // weight_decay >= 0.
  void validate() const;
};

// [hybrid_zero_optimizer]
struct HybridZeroOptions {
  double clip_grad_norm = 1.0;     // hybrid_zero_optimizer.clip_grad_norm (0 = no clipping)
  void validate() const;           // clip_grad_norm >= 0
};

// [lr_scheduler]: checked by LrSchedule, which also reads adam.lr and data.total_steps.
struct LrSchedulerOptions {
  std::string kind = "cosine";     // lr_scheduler.kind: cosine, constant or wsd
  double warmup_ratio = 0.01;      // lr_scheduler.warmup_ratio
  int64_t warmup_steps = -1;       // lr_scheduler.warmup_steps: Wst itself (Megatron's --lr-warmup-iters); -1 = from the ratio
  int64_t init_steps = 0;          // lr_scheduler.init_steps: updates at lr 0 before the warmup
  double eta_min = 1e-5;           // lr_scheduler.eta_min
  double decay_ratio = 0.1;        // lr_scheduler.decay_ratio: wsd's final decay, a fraction of total_steps
  std::string on_resume = "refuse";  // lr_scheduler.on_resume: refuse, apply or keep (startup.h)
};

}  // namespace loom
