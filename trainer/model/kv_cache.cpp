#include "kv_cache.h"

#include "attention.h"
#include "loom/error.h"

namespace loom {

KVCache::KVCache(const InternLMImpl& model, int64_t batch, int64_t max_len) : capacity_(max_len), batch_(batch) {
  const ModelOptions& o = model.options();
  LOOM_CHECK(batch > 0 && max_len > 0, "KV cache needs a positive batch and length, got ", batch, " x ", max_len);
  const torch::Tensor& w = model.tok_embeddings->weight;
  const auto opt = torch::TensorOptions().dtype(w.scalar_type()).device(w.device());
  for (int64_t i = 0; i < o.num_layers; ++i) {
    k_.push_back(torch::zeros({batch, max_len, o.kv_heads(), o.head_dim()}, opt));
    v_.push_back(torch::zeros({batch, max_len, o.kv_heads(), o.head_dim()}, opt));
  }
}

torch::Tensor forward_cached(InternLMImpl& model, const torch::Tensor& tokens, KVCache& cache, bool last_only) {
  torch::NoGradGuard no_grad;
  const ModelOptions& o = model.options();
  LOOM_CHECK(tokens.dim() == 2 && tokens.size(0) == cache.batch_, "forward_cached: tokens must be [", cache.batch_,
             ", t], got ", tokens.sizes());
  const int64_t B = tokens.size(0), t = tokens.size(1), L = cache.length_;
  LOOM_CHECK(t > 0, "forward_cached: no tokens");
  LOOM_CHECK(L + t <= cache.capacity_, "forward_cached: ", L, " cached + ", t, " new positions exceed the cache's ",
             cache.capacity_);
  const int64_t lo = tokens.min().item<int64_t>(), hi = tokens.max().item<int64_t>();
  LOOM_CHECK(lo >= 0 && hi < o.vocab_size, "token ids must lie in [0, ", o.vocab_size, "), got ", lo, "..", hi);
  const int64_t H = o.num_attention_heads, K = o.kv_heads(), D = o.head_dim();
  const auto dev = tokens.device();

  // Rotary tables for positions L..L+t-1, from the same code the training forward uses.
  Batch pos;
  pos.tokens = tokens;
  pos.positions = torch::arange(L, L + t, torch::TensorOptions().dtype(torch::kInt64).device(dev)).expand({B, t});
  pos.segments = torch::zeros({B, t}, torch::TensorOptions().dtype(torch::kInt32).device(dev));
  const PackedContext ctx = make_packed_context(pos, D, o.rope_base);
  // New query i (position L+i) sees cached and new keys j <= L+i.
  const torch::Tensor mask =
      torch::ones({t, L + t}, torch::TensorOptions().dtype(torch::kBool).device(dev)).tril(L).view({1, 1, 1, t, L + t});

  torch::Tensor h = model.tok_embeddings(tokens);
  for (int64_t i = 0; i < o.num_layers; ++i) {
    auto* layer = model.layers[i]->as<DecoderLayerImpl>();
    LOOM_ASSERT(layer != nullptr, "layer ", i, " is not a DecoderLayer");
    auto& attn = *layer->attention;
    const torch::Tensor qkv = attn.wqkv(layer->attention_norm(h));
    const torch::Tensor q = apply_rotary(qkv.narrow(-1, 0, H * D).view({B, t, H, D}), ctx);
    const torch::Tensor k = apply_rotary(qkv.narrow(-1, H * D, K * D).view({B, t, K, D}), ctx);
    const torch::Tensor v = qkv.narrow(-1, (H + K) * D, K * D).view({B, t, K, D});
    cache.k_[i].narrow(1, L, t).copy_(k);
    cache.v_[i].narrow(1, L, t).copy_(v);
    const torch::Tensor a =
        masked_attention(q, cache.k_[i].narrow(1, 0, L + t), cache.v_[i].narrow(1, 0, L + t), mask);
    h = h + attn.wo(a.reshape({B, t, H * D}));
    h = h + layer->feed_forward(layer->ffn_norm(h));
  }
  cache.length_ = L + t;
  if (last_only) h = h.narrow(1, t - 1, 1);
  h = model.norm(h.to(torch::kFloat32));
  const torch::Tensor head = o.tie_embeddings ? model.tok_embeddings->weight : model.output->weight;
  return torch::linear(h.to(head.scalar_type()), head).to(torch::kFloat32);
}

}  // namespace loom
