// FLOPs per trained token, for TFLOP/s and MFU (definitions written once here; docs/TRAIN.md
// repeats them). One multiply-add = 2 FLOPs; backward = 2x forward.
//
//   model FLOPs/token    = 6 * N_mm + 12 * L * C * T
//   hardware FLOPs/token = model FLOPs/token + 2 * N_mm_ckpt + 4 * L_ckpt * C * T
//
//   N_mm   parameters that take part in a matmul: per layer wqkv (C * (H + 2K) * D), wo (H * D * C),
//          w1, w2, w3 (3 * C * F), plus the head (V * C). Embedding lookups, norms and biases are
//          not matmuls and are left out.
//   12 L C T  attention scores and the weighted sum: q k^T and p v cost 2 * 2 * C * T FLOPs per
//          token per layer forward, 3x that for training. T is data.seq_len and the full T x T
//          square is counted (PaLM, appendix B, and InternLM's get_megatron_flops), although the
//          causal, packed mask computes less: MFU stays comparable with published figures.
//   hardware adds the forward recomputed by activation checkpointing (L_ckpt layers, N_mm_ckpt
//   their matmul parameters), as InternLM's "tflops" (its factor 4 instead of 3 for checkpointed
//   runs).
// MFU = model FLOPs/token * tokens/s per device / peak FLOP/s of the device.
//
//   executed FLOPs of a micro-batch = tokens * (6 * N_mm + 2 * N_mm_ckpt)
//                                     + sum over documents of n (n + 1) * C * (6 * L + 2 * L_ckpt)
//   what the kernels compute: causal attention within each document (n (n + 1) / 2 query-key
//   pairs, two matmuls: 2 C n (n + 1) FLOPs forward per layer, x3 with the backward, +1 forward per
//   recomputed layer), padding
//   rows' matmuls included. HFU = executed FLOPs / s / peak: on packs of one document it is the
//   model FLOPs' attention halved (causal), on packs of short documents far less.
#pragma once

#include <cstdint>

#include "model.h"

namespace loom {

// N_mm of one decoder layer, and of the whole model (layers + head).
int64_t layer_matmul_parameters(const ModelOptions& m);
int64_t matmul_parameters(const ModelOptions& m);

double model_flops_per_token(const ModelOptions& m, int64_t seq_len);
double hardware_flops_per_token(const ModelOptions& m, int64_t seq_len);
// cu_seqlens_host: [S+1] int32 on the CPU, the micro-batch's documents; tokens = B * T.
double executed_flops(const ModelOptions& m, int64_t tokens, const torch::Tensor& cu_seqlens_host);

}  // namespace loom
