#include "attention.h"

#include <cmath>
#include <limits>

#include "fused_ops.h"
#include "loom/error.h"

namespace loom {
namespace {

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

PackedContext make_packed_context(const Batch& batch, int64_t head_dim, double rope_base,
                                  VarlenAttentionFn kernel) {
  LOOM_CHECK(batch.tokens.dim() == 2, "batch tokens must be [B, T], got ", batch.tokens.sizes());
  LOOM_CHECK(batch.positions.sizes() == batch.tokens.sizes() && batch.segments.sizes() == batch.tokens.sizes(),
             "batch positions ", batch.positions.sizes(), " and segments ", batch.segments.sizes(),
             " must have the shape of tokens ", batch.tokens.sizes());
  LOOM_ASSERT(head_dim % 2 == 0, "rotary needs an even head dim, got ", head_dim);
  const auto dev = batch.tokens.device();
  PackedContext ctx;

  // fp32 as InternLM (and HF) compute inv_freq and the angles.
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  torch::Tensor inv_freq =
      1.0 / torch::pow(rope_base, torch::arange(0, head_dim, 2, f32) / static_cast<double>(head_dim));
  torch::Tensor angles = batch.positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq;  // [B, T, D/2]
  angles = torch::cat({angles, angles}, -1).unsqueeze(2);                                  // [B, T, 1, D]
  ctx.cos = angles.cos();
  ctx.sin = angles.sin();

  if (!kernel) {
    // Query i sees key j iff j <= i in the same document. Padding (segment -1) sees only itself, so
    // no softmax row is empty (an empty row would make NaNs that reach the gradients).
    const int64_t T = batch.tokens.size(1);
    const torch::Tensor seg = batch.segments;
    const torch::Tensor same = seg.unsqueeze(2) == seg.unsqueeze(1);  // [B, T, T]
    const torch::Tensor real = (seg >= 0).unsqueeze(2);
    const auto bopt = torch::TensorOptions().dtype(torch::kBool).device(dev);
    const torch::Tensor causal = torch::ones({T, T}, bopt).tril();
    const torch::Tensor diag = torch::eye(T, bopt);
    ctx.mask = ((same & real & causal) | diag).unsqueeze(1).unsqueeze(1);  // [B, 1, 1, T, T]
    ctx.bias = mask_to_bias(ctx.mask);  // once per batch, shared by every layer
  }
  ctx.cu_seqlens = batch.cu_seqlens;
  ctx.cu_seqlens_host = batch.cu_seqlens.is_cpu() ? batch.cu_seqlens : batch.cu_seqlens_host;
  ctx.max_seqlen = batch.max_seqlen;
  ctx.kernel = std::move(kernel);
  return ctx;
}

torch::Tensor apply_rotary(const torch::Tensor& x, const PackedContext& ctx) {
  if (x.is_cuda() && fused_kernels_available()) {
    // The fused kernel reads x in place (a view of the QKV projection) and takes the D/2 angles.
    const int64_t half = x.size(-1) / 2;
    return fused_rotary(x, ctx.cos.squeeze(2).narrow(-1, 0, half), ctx.sin.squeeze(2).narrow(-1, 0, half));
  }
  const torch::Tensor xf = x.to(torch::kFloat32);
  return (xf * ctx.cos + rotate_half(xf) * ctx.sin).to(x.scalar_type());
}

torch::Tensor mask_to_bias(const torch::Tensor& mask) {
  return torch::zeros(mask.sizes(), mask.options().dtype(torch::kFloat32))
      .masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity());
}

torch::Tensor biased_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& bias) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), K = k.size(2);
  LOOM_ASSERT(H % K == 0, "query heads ", H, " not a multiple of kv heads ", K);
  const int64_t G = H / K;
  // Group the query heads by their kv head and broadcast k/v over the group: no repeated copies.
  // The scale goes on q (T/D times fewer elements than the scores) and the mask is added in place:
  // no masked_fill and no scaling pass over [B, H, T, T], forward or backward.
  const torch::Tensor qg = (q * (1.0 / std::sqrt(double(D)))).view({B, T, K, G, D}).permute({0, 2, 3, 1, 4});
  const torch::Tensor kg = k.permute({0, 2, 1, 3}).unsqueeze(2);  // [B, K, 1, T, D]
  const torch::Tensor vg = v.permute({0, 2, 1, 3}).unsqueeze(2);
  torch::Tensor scores = torch::matmul(qg, kg.transpose(-1, -2)).to(torch::kFloat32);  // [B, K, G, T, T]
  scores.add_(bias);
  const torch::Tensor probs = torch::softmax(scores, -1).to(v.scalar_type());
  const torch::Tensor out = torch::matmul(probs, vg);  // [B, K, G, T, D]
  return out.permute({0, 3, 1, 2, 4}).reshape({B, T, H, D});
}

torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& mask) {
  return biased_attention(q, k, v, mask_to_bias(mask));
}

torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const PackedContext& ctx) {
  const VarlenAttentionFn& varlen = ctx.kernel;
  if (!varlen) return biased_attention(q, k, v, ctx.bias);
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), K = k.size(2);
  LOOM_CHECK(ctx.cu_seqlens.defined(), "the varlen attention kernel needs Batch::cu_seqlens");
  torch::Tensor out = varlen(q.reshape({B * T, H, D}), k.reshape({B * T, K, D}), v.reshape({B * T, K, D}),
                             ctx.cu_seqlens, ctx.cu_seqlens_host, ctx.max_seqlen, 1.0 / std::sqrt(double(D)));
  return out.view({B, T, H, D});
}

}  // namespace loom
