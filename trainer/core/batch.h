// One micro-batch as the model sees it: the contract between the loader (which builds it from
// packed shards) and the model/loss (which consume it).
//
// Shape letters, fixed here for the whole trainer:
//   B micro-batch size (data.micro_bsz)   T sequence length (data.seq_len)
//   C hidden size    H attention heads    K kv heads    D head dim (C / H)
//   F MLP hidden     V vocab size         S segments in a micro-batch
#pragma once

#include <vector>

#include <torch/torch.h>

namespace loom {

inline constexpr int64_t kIgnoreIndex = -100;  // labels that carry no loss (as torch's cross_entropy)

struct Batch {
  torch::Tensor tokens;      // [B, T] int64 input ids (padding holds the shard's pad_id)
  torch::Tensor labels;      // [B, T] int64 target of position t = tokens[t+1] of the same segment;
                             // kIgnoreIndex for padding and for each segment's last token
  torch::Tensor positions;   // [B, T] int64 position ids, restarting at 0 in every segment (0 on padding)
  torch::Tensor segments;    // [B, T] int32 segment index within its row, -1 on padding. Token i attends
                             // to token j iff j <= i and segments[i] == segments[j] != -1
  torch::Tensor cu_seqlens;  // [S+1] int32 cumulative segment lengths over the flattened B*T tokens
                             // (each padding run counts as one segment), for varlen flash attention
  torch::Tensor cu_seqlens_host;  // cu_seqlens on the CPU, kept by to(): kernels that plan per segment
                                  // read it without waiting for the device
  int64_t max_seqlen = 0;    // longest segment in cu_seqlens
  int64_t num_loss_tokens = 0;  // labels != kIgnoreIndex
  torch::Tensor dataset_ids;  // [B] int64 dataset (sub-folder) index of each row, for per-dataset metrics

  // Moves every tensor to device (non_blocking from pinned memory).
  Batch to(const torch::Device& device, bool non_blocking = false) const;
};

// ids as one document in a batch of one row, without labels: the forward pass of generation's
// reference path and of tests.
Batch single_document(const std::vector<int64_t>& ids);

}  // namespace loom
