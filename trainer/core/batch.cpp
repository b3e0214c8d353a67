#include "batch.h"

namespace loom {

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  Batch b = *this;
  b.tokens = tokens.to(device, non_blocking);
  b.labels = labels.to(device, non_blocking);
  b.positions = positions.to(device, non_blocking);
  b.segments = segments.to(device, non_blocking);
  b.cu_seqlens = cu_seqlens.to(device, non_blocking);
  if (cu_seqlens.is_cpu()) b.cu_seqlens_host = cu_seqlens;
  b.dataset_ids = dataset_ids.to(device, non_blocking);
  return b;
}

Batch single_document(const std::vector<int64_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size());
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  Batch b;
  b.tokens = torch::tensor(ids, i64).view({1, T});
  b.positions = torch::arange(T, i64).view({1, T});
  b.segments = torch::zeros({1, T}, torch::TensorOptions().dtype(torch::kInt32));
  b.labels = torch::full({1, T}, kIgnoreIndex, i64);
  b.cu_seqlens = torch::tensor({0, static_cast<int32_t>(T)}, torch::TensorOptions().dtype(torch::kInt32));
  b.max_seqlen = T;
  b.dataset_ids = torch::zeros({1}, i64);
  return b;
}

}  // namespace loom
