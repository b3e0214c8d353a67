// Helpers shared by the GPU tests: the CUDA device, a hand-built packed Batch and tolerances.
#pragma once

#include <algorithm>
#include <vector>

#include <ATen/Context.h>
#include <torch/torch.h>

#include "batch.h"

namespace loom::test {

inline torch::Device cuda() { return torch::Device(torch::kCUDA, 0); }

// fp32 matmuls in fp32, not TF32's 10-bit mantissa, while it lives: for comparisons against fp32
// references. Restores the process's setting (the trainer's tests turn TF32 on, as a run does).
class ExactFp32Matmuls {
 public:
  ExactFp32Matmuls() : cublas_(at::globalContext().allowTF32CuBLAS()), cudnn_(at::globalContext().allowTF32CuDNN()) {
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
  }
  ~ExactFp32Matmuls() {
    at::globalContext().setAllowTF32CuBLAS(cublas_);
    at::globalContext().setAllowTF32CuDNN(cudnn_);
  }
  ExactFp32Matmuls(const ExactFp32Matmuls&) = delete;
  ExactFp32Matmuls& operator=(const ExactFp32Matmuls&) = delete;

 private:
  bool cublas_, cudnn_;
};

// max |a - b| / (max |b| + 1e-6): the error relative to the reference's scale.
inline double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor bd = b.detach().to(torch::kFloat64).cpu();
  const torch::Tensor ad = a.detach().to(torch::kFloat64).cpu();
  return (ad - bd).abs().max().item<double>() / (bd.abs().max().item<double>() + 1e-6);
}

// A [B, T] batch whose rows hold documents of the given lengths, padding after them (segment -1,
// padding id 0, no label), tokens drawn in [1, V). cu_seqlens counts each padding run as a segment.
inline Batch make_packed_batch(const std::vector<std::vector<int64_t>>& doc_lengths, int64_t T, int64_t V,
                               uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t B = static_cast<int64_t>(doc_lengths.size());
  Batch b;
  b.tokens = torch::zeros({B, T}, torch::kLong);
  b.labels = torch::full({B, T}, kIgnoreIndex, torch::kLong);
  b.positions = torch::zeros({B, T}, torch::kLong);
  b.segments = torch::full({B, T}, -1, torch::kInt32);
  std::vector<int32_t> cu{0};
  int64_t max_len = 0;
  for (int64_t r = 0; r < B; ++r) {
    int64_t t = 0, seg = 0;
    for (int64_t len : doc_lengths[r]) {
      const torch::Tensor ids = torch::randint(1, V, {len}, torch::kLong);
      b.tokens[r].narrow(0, t, len).copy_(ids);
      b.labels[r].narrow(0, t, len - 1).copy_(ids.narrow(0, 1, len - 1));
      b.positions[r].narrow(0, t, len).copy_(torch::arange(len, torch::kLong));
      b.segments[r].narrow(0, t, len).fill_(seg++);
      t += len;
      cu.push_back(static_cast<int32_t>(r * T + t));
      max_len = std::max(max_len, len);
    }
    if (t < T) {
      cu.push_back(static_cast<int32_t>((r + 1) * T));
      max_len = std::max(max_len, T - t);
    }
  }
  b.cu_seqlens = torch::tensor(cu, torch::kInt32);
  b.max_seqlen = max_len;
  b.num_loss_tokens = (b.labels != kIgnoreIndex).sum().item<int64_t>();
  b.dataset_ids = torch::zeros({B}, torch::kLong);
  return b;
}

}  // namespace loom::test
