// Incremental decoding for generation: each layer's rotated keys and values of the tokens seen so
// far are kept, so a new token costs one position of work instead of a forward over the whole text.
// Computes the same function as InternLMImpl::forward (model.h) in eval mode on one unpacked
// sequence per row; tests/trainer/hf_generate_test.cpp holds the two paths to the same tokens.
// Shapes follow trainer/core/batch.h: B T C H K D V, and L for positions already cached.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "model.h"

namespace loom {

class KVCache {
 public:
  // Room for max_len positions of B rows of model; tensors on the model's device and dtype.
  KVCache(const InternLMImpl& model, int64_t batch, int64_t max_len);
  int64_t length() const { return length_; }   // L: positions filled
  int64_t capacity() const { return capacity_; }

 private:
  friend torch::Tensor forward_cached(InternLMImpl& model, const torch::Tensor& tokens, KVCache& cache,
                                      bool last_only);
  std::vector<torch::Tensor> k_, v_;  // per layer [B, max_len, K, D]
  int64_t length_ = 0, capacity_ = 0, batch_ = 0;
};

// Runs tokens [B, t] at positions L..L+t-1 (attending to the cached L positions and causally among
// themselves), appends their keys and values to cache and returns fp32 logits [B, t, V], or
// [B, 1, V] for the last position only when last_only. No gradients are recorded.
torch::Tensor forward_cached(InternLMImpl& model, const torch::Tensor& tokens, KVCache& cache, bool last_only = true);

}  // namespace loom
