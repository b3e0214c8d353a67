// Linear and Embedding as the model uses them: their parameters are allocated with the given
// options (device, dtype) and left uninitialised, for the model to fill (model.h, init.h).
// torch::nn::Linear and torch::nn::Embedding allocate fp32 on the CPU and draw their own default
// init, which the model would overwrite: for a 7B model that is 28 GB of host memory and a minute.
// Parameter names ("weight", "bias") and forward() are torch::nn's; a Linear marked fp8 runs its
// matmuls in FP8 where fp8_linear applies (fp8_linear.h), else as torch::linear.
#pragma once

#include <torch/torch.h>

#include "fp8_linear.h"

namespace loom {

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias, const torch::TensorOptions& t = {});
  // Without bias, over the given [out_features, in_features] tensor (a view into a larger one:
  // the MLP's w1 and w2 share one allocation, for fused_gated_projection).
  explicit LinearImpl(const torch::Tensor& weight);
  torch::Tensor forward(const torch::Tensor& x) {
    return fp8 && fp8_linear_applies(x, weight) ? fp8_linear(x, weight, bias, fp8_cache_weight)
                                                : torch::linear(x, weight, bias);
  }
  torch::Tensor weight;  // [out_features, in_features]
  torch::Tensor bias;    // [out_features], undefined without bias
  bool fp8 = false;
  bool fp8_cache_weight = false;  // fp8_linear's cache_weight
};
TORCH_MODULE(Linear);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t dim, const torch::TensorOptions& t = {});
  torch::Tensor forward(const torch::Tensor& ids) { return torch::embedding(weight, ids); }
  torch::Tensor weight;  // [num_embeddings, dim]
};
TORCH_MODULE(Embedding);

}  // namespace loom
