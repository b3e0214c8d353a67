#include "linear.h"

namespace loom {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool bias, const torch::TensorOptions& t) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}, t));
  if (bias) this->bias = register_parameter("bias", torch::empty({out_features}, t));
}

LinearImpl::LinearImpl(const torch::Tensor& w) { weight = register_parameter("weight", w); }

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim, const torch::TensorOptions& t) {
  weight = register_parameter("weight", torch::empty({num_embeddings, dim}, t));
}

}  // namespace loom
