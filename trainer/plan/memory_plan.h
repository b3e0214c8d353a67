// The memory plan of a run: per-rank bytes of every kind of state, computed from the shapes alone
// (no tensor is allocated), compared with the device's memory before anything is allocated.
// `loom-train plan` prints it; loom-train runs it at start, refuses a run that does not fit and
// resolves model.checkpoint=auto with it.
//
// Per rank, P parameters, b bytes per element of model.dtype, Tok = micro_bsz * seq_len tokens of
// one micro-batch (micro-batches run one after the other, so micro_num does not add activations,
// only whole gradients beside them):
// With ZeRO (parallel.zero1 = S != 1, parallel.zero_stage z; zero.h), L = one layer's parameters,
// R = P - N L the ones outside the layers (embedding, final norm, head):
//   parameters       P b; at z = 3 the chunk P b / S, and gathered: R (through a step) and three
//                    layers (the one running, the next one prefetched, the one freed last); FP8 runs
//                    of several micro-batches without ZeRO add their linears' cached e4m3 weights, 2
//                    bytes a weight (model.fp8_weight_cache; then not counted with the activations)
//   gradients        P b (accumulated over micro-batches in the parameters' dtype); sharded runs
//                    add the fp32 gradient shard 4 P / S; at z >= 2 the whole gradients live only
//                    until their unit is reduced: R b, and two layers'. CUDA, replicated, one
//                    micro-batch a step: released after each update, so beside the activations only
//                    max((R + L) b, P b - activations); with micro_num > 1 all of P b, as the next
//                    micro-batch's forward runs beside the first one's gradients
//   optimizer_state  AdamW's two fp32 moments, 8 P, plus a 4 P fp32 master copy when b < 4;
//                    ZeRO holds 12 P / S (its master is always fp32)
//   activations      a layer keeps, per token, what its backward reads: the two RMSNorm inputs and
//                    outputs (4 C), q k v (C + 2 K D), the attention output (C), the MLP's two
//                    projections and their SwiGLU product (3 F), in b bytes, plus fp32 norm
//                    statistics and the kernel's own state (flash: the log-sum-exp, H fp32; the CPU
//                    segment kernel: q k v copies and its probabilities; the masked path: B H T T
//                    probabilities). A recomputed layer (model.checkpoint) keeps only its input
//                    (C b) and, in backward, one layer is live again at a time. Backward adds one
//                    layer's transient gradients ((3 F + 2 C) b per token; with cuDNN attention also
//                    its fp32 query-gradient accumulator and row sums, H (D + 1) 4, and once per
//                    micro-batch the bias of its windows of short documents). With model.precision=fp8
//                    the linears that run in FP8 (sizes multiples of 16) hold, per kept layer, their
//                    transposed e4m3 weights (1 byte each) and 1-byte copies of their inputs: per
//                    token 3 C + F bytes in place of the norm outputs and the SwiGLU product ((2 C + F) b).
//   logits_and_loss  the chunked loss: one [chunk, V] fp32 block (chunk = 2^30 / (4 V) tokens),
//                    the hidden states' gradient (fp32) and the final norm's input and output
//   workspace        ZeRO's reduction buffers, fp32, of at most three units at once, and the gather
//                    of one unit (U = the largest unit, a layer or the embedding: 12 U + U b), and the
//                    runtime: cuBLAS and flash workspaces on CUDA (256 MiB), LibTorch and BLAS on
//                    the CPU (256 MiB, measured with one thread)
// The figures were checked against the CUDA caching allocator's peak on an H200 (bench/RESULTS.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention_select.h"
#include "model.h"

namespace loom {

struct PlanInputs {
  ModelOptions model;              // model.checkpoint is the recompute fraction planned
  int64_t micro_bsz = 1;           // B
  int64_t seq_len = 2048;          // T
  int64_t micro_num = 1;           // > 1: gradients whole beside activations; suggestions keep the global batch
  int64_t world_size = 1;          // W
  int64_t zero1 = 1;               // parallel.zero1: 1 = replicated; -1 or 0 = every rank; else S
  bool cuda = false;               // device kind (the runtime's share of workspace)
  AttentionKernel attention = AttentionKernel::kMasked;  // choose_attention's, as the run installs it
  std::string attention_source;    // how the device's kernels were known (AttentionCaps::source)
  uint64_t device_bytes = 0;       // memory of one device (host RAM for CPU runs)
  double margin = 0.05;            // fraction of device_bytes kept free: fits = total <= (1 - margin) device
  int64_t zero_stage = 1;          // parallel.zero_stage (with zero1 != 1): 1, 2 or 3
};

struct MemoryPlan {
  PlanInputs in;
  int64_t num_parameters = 0;
  int64_t zero_shards = 1;         // S: ways the optimizer state is split (1 = replicated)
  int64_t checkpointed_layers = 0;
  // Per rank, bytes.
  uint64_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, logits_and_loss = 0,
           workspace = 0, total = 0;
  uint64_t layer_full_bytes = 0;         // activations of one layer that is not recomputed
  uint64_t layer_checkpointed_bytes = 0; // of one recomputed layer (its input)
  uint64_t fp8_weight_copies = 0;        // of parameters: the FP8 weight cache (model.fp8_weight_cache)
  bool fits = false;
  std::vector<std::string> suggestions;  // settings that would fit, when it does not

  // The largest of the six terms, by name ("optimizer_state", ...), and its bytes.
  std::string largest_term() const;
  uint64_t largest_term_bytes() const;
  // Why a run that does not fit is refused: total against the device, the largest term, what would fit.
  std::string refusal(const std::string& device_name) const;
  // One JSON object (shortest round-trip numbers): fits, world_size, device_bytes,
  // per_rank_bytes {parameters, gradients, optimizer_state, activations, logits_and_loss,
  // workspace, total}, checkpoint_fraction, checkpointed_layers, suggestions, ...
  std::string to_json() const;
  // A table for people: each term in GiB with its share, the total against the device, the verdict.
  std::string to_text() const;
};

// The plan of `in` as given. Suggestions are filled when it does not fit. Every size is checked
// first against its limit (size_limits.h; loom::Error naming the key), and the plan's arithmetic
// is checked: a shape whose bytes pass 64 bits throws UsageError naming the size keys.
MemoryPlan plan_memory(const PlanInputs& in);

// model.checkpoint=auto: the smallest recompute fraction k / num_layers whose plan fits within
// in.margin; 1 (every layer) when none does (the plan then says what else would fit). The same
// checks of the inputs first.
double auto_checkpoint_fraction(const PlanInputs& in);

}  // namespace loom
