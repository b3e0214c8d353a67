// The shapes of the fused QKV split (fused_ops.h's fused_qkv_rotary, on CUDA and CPU): a
// projection qkv [..., W] with W = (H + 2K) D splits into q [..., H, D] and k, v [..., K, D].
// One place for the shape arithmetic and for what both autograd functions keep for backward.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace loom {

struct QkvLayout {
  std::vector<int64_t> qkv_sizes;  // [..., W]
  int64_t H, K, D, W, tokens;      // tokens: the product of the leading dims

  QkvLayout(std::vector<int64_t> sizes, int64_t heads, int64_t kv_heads)
      : qkv_sizes(std::move(sizes)), H(heads), K(kv_heads), D(qkv_sizes.back() / (heads + 2 * kv_heads)),
        W(qkv_sizes.back()), tokens(1) {
    for (size_t i = 0; i + 1 < qkv_sizes.size(); ++i) tokens *= qkv_sizes[i];
  }

  // [..., heads, D]: q's shape for heads = H, k's and v's for heads = K.
  std::vector<int64_t> head_sizes(int64_t heads) const {
    std::vector<int64_t> s(qkv_sizes.begin(), qkv_sizes.end() - 1);
    s.push_back(heads);
    s.push_back(D);
    return s;
  }

  void save(torch::autograd::AutogradContext* ctx) const {
    ctx->saved_data["H"] = H;
    ctx->saved_data["K"] = K;
    ctx->saved_data["sizes"] = qkv_sizes;
  }
  static QkvLayout load(torch::autograd::AutogradContext* ctx) {
    return QkvLayout(ctx->saved_data["sizes"].toIntVector(), ctx->saved_data["H"].toInt(),
                     ctx->saved_data["K"].toInt());
  }
};

}  // namespace loom
