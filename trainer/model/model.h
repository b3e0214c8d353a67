// The InternLM architecture (InternLM-7B/20B, i.e. LLaMA with biased fused QKV):
//
//   tok_embeddings -> N x DecoderLayer -> norm (RMSNorm, fp32) -> output (untied head) -> logits fp32
//   DecoderLayer:  h = x + dropout(attention(attention_norm(x)))
//                  y = h + dropout(feed_forward(ffn_norm(h)))
//   attention:     wqkv (fused, optional bias) -> rotary (rotate-half, base 10000) on q and k ->
//                  causal packed attention, scale 1/sqrt(D), GQA -> wo (optional bias)
//   feed_forward:  w3(silu(w1 x) * w2 x), F = 256 * ceil(C * mlp_ratio / 256), no biases
//
// Parameter names and layouts (what a checkpoint holds; row = output feature, as nn.Linear):
//   tok_embeddings.weight                [V, C]
//   layers.i.attention_norm.weight       [C]
//   layers.i.attention.wqkv.weight/bias  [(H + 2K) * D, C]: rows [0, H*D) are q (head h at rows
//                                        h*D..h*D+D), then K*D rows of k, then K*D rows of v.
//   layers.i.attention.wo.weight/bias    [C, H*D]
//   layers.i.ffn_norm.weight             [C]
//   layers.i.feed_forward.w1/w2/w3.weight  [F, C], [F, C], [C, F]
//   norm.weight                          [C] (kept in fp32)
//   output.weight                        [V, C] (absent when tie_embeddings: the head is tok_embeddings)
// Mapping to other checkpoints, rotate-half layout throughout, so no row permutation of q/k:
//   HF LLaMA: q_proj/k_proj/v_proj = the three row blocks of wqkv; o_proj = wo; gate_proj = w1,
//     up_proj = w2, down_proj = w3; input_layernorm = attention_norm,
//     post_attention_layernorm = ffn_norm; embed_tokens, norm, lm_head.
//   InternLM2: wqkv is grouped per kv head [q of its G = H/K heads, k, v]: a row permutation of
//     ours; its feed_forward w1, w3, w2 are our w1, w2, w3.
#pragma once

#include <optional>
#include <string>

#include <torch/torch.h>

#include "attention.h"
#include "batch.h"
#include "init.h"
#include "layer_hooks.h"
#include "linear.h"

namespace loom {

struct ModelOptions {
  int64_t hidden_size = 512;             // C
  int64_t num_layers = 4;                // N
  int64_t num_attention_heads = 8;       // H
  int64_t num_kv_attention_heads = 0;    // K; 0 = H (multi-head attention)
  double mlp_ratio = 8.0 / 3.0;
  int64_t vocab_size = 103168;           // V
  double norm_eps = 1e-5;                // InternLM's layer_norm_epsilon
  bool qkv_bias = true;
  bool out_bias = true;                  // bias of the attention output projection wo
  bool tie_embeddings = false;
  double init_std = 0.02;
  bool scaled_init = true;               // wo and w3 drawn with init_std / sqrt(2 * num_layers)
  double dropout = 0.0;                  // residual dropout after attention and after the MLP
  double checkpoint = 0.0;               // fraction of layers recomputed in backward (the first ones)
  double rope_base = 10000.0;
  torch::Dtype dtype = torch::kFloat32;  // parameters and activations (norm and logits stay fp32)
  bool checkpoint_auto = false;          // model.checkpoint=auto: the loop sets checkpoint from the memory plan
  double checkpoint_margin = 0.08;       // model.checkpoint_margin: device memory auto leaves free
  bool fp8 = false;                      // model.precision=fp8: the layers' linears run FP8 matmuls (fp8_linear.h)
  // Not a key: plan_inputs sets it for fp8 runs of several micro-batches a step, whose linears then
  // keep their weights' e4m3 copies between forwards (fp8_linear's cache_weight; the plan counts them).
  bool fp8_weight_cache = false;

  int64_t kv_heads() const { return num_kv_attention_heads > 0 ? num_kv_attention_heads : num_attention_heads; }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t ffn_hidden() const;            // F
  int64_t checkpointed_layers() const;   // int(num_layers * checkpoint), as InternLM
  // Throws loom::Error naming the offending model.* key: a value out of its range or above its
  // size limit (size_limits.h), or sizes whose parameter count exceeds 2^63 - 1.
  void validate() const;
};

// "float32"/"fp32", "bfloat16"/"bf16", "float16"/"fp16"/"half", also InternLM's "torch.bfloat16".
torch::Dtype parse_dtype(const std::string& name);
std::string dtype_name(torch::Dtype dtype);

// Parameter count in closed form (no allocation): for the 7B/20B shapes. Checked arithmetic:
// SizeOverflow (size_limits.h), naming the size keys, where the count exceeds 2^63 - 1.
int64_t count_parameters(const ModelOptions& o);
// Of one decoder layer.
int64_t count_parameters_per_layer(const ModelOptions& o);

// ---- blocks ----
// Each block allocates its parameters with the TensorOptions t it is given (device, dtype),
// uninitialised but for the norms' ones: InternLMImpl fills them.

struct RMSNormOptions {
  int64_t dim;
  double eps;
};
// y = weight * x / sqrt(mean(x^2) + eps), computed in fp32, returned in the weight's dtype.
class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(const RMSNormOptions& o, const torch::TensorOptions& t = {});
  torch::Tensor forward(const torch::Tensor& x);
  // {h, forward(h)} with h = x + r, or x itself when r is undefined, through
  // fused_residual_rmsnorm (CUDA; the caller checks fused_residual_rmsnorm_applies).
  std::vector<torch::Tensor> forward_residual(const torch::Tensor& x, const torch::Tensor& r);
  torch::Tensor weight;
  // The output feeds FP8 linears: the fused kernel publishes its maximum for them (fused_ops.h).
  bool feeds_fp8 = false;

 private:
  RMSNormOptions o_;
};
TORCH_MODULE(RMSNorm);

struct AttentionOptions {
  int64_t hidden_size, num_heads, num_kv_heads;
  bool qkv_bias, out_bias;
};
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttentionOptions& o, const torch::TensorOptions& t = {});
  torch::Tensor forward(const torch::Tensor& x, const PackedContext& ctx);  // [B, T, C] -> [B, T, C]
  Linear wqkv{nullptr}, wo{nullptr};

 private:
  AttentionOptions o_;
};
TORCH_MODULE(Attention);

struct FeedForwardOptions {
  int64_t hidden_size, ffn_hidden;
};
class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const FeedForwardOptions& o, const torch::TensorOptions& t = {});
  torch::Tensor forward(const torch::Tensor& x);  // w3(silu(w1 x) * w2 x)
  Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

struct DecoderLayerOptions {
  AttentionOptions attention;
  FeedForwardOptions feed_forward;
  double norm_eps, dropout;
  bool checkpoint;  // recompute this layer in backward
};
class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const DecoderLayerOptions& o, const torch::TensorOptions& t = {});
  torch::Tensor forward(const torch::Tensor& x, const PackedContext& ctx);
  // The layer's output left as two terms {h, m} of the residual stream h + m, on the residual
  // stream x + pending (pending may be undefined): the add happens in the next norm's kernel, in
  // forward and (as the gradient's copy) in backward. CUDA, not recomputed, no residual dropout.
  bool splits_output(const torch::Tensor& x);
  std::vector<torch::Tensor> forward_split(const torch::Tensor& x, const torch::Tensor& pending,
                                           const PackedContext& ctx);
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  Attention attention{nullptr};
  FeedForward feed_forward{nullptr};

 private:
  torch::Tensor body(const torch::Tensor& x, const PackedContext& ctx);
  DecoderLayerOptions o_;
};
TORCH_MODULE(DecoderLayer);

// ---- the model ----

class InternLMImpl : public torch::nn::Module {
 public:
  // Both constructors apply InternLM's init: normal(0, init_std), wo and w3 normal(0, init_std /
  // sqrt(2 N)) with scaled_init, biases 0, norms 1; the final norm is fp32, the rest o.dtype.
  //
  // On the CPU from torch's default generator (torch::manual_seed): built in fp32 with the draws
  // torch::nn::Embedding and torch::nn::Linear made at construction, then normal_ per parameter
  // in named_parameters() order, then cast to o.dtype. The exact stream this model had before
  // ModelInit existed: tests and tools that load weights next (generate, HF import) use it.
  explicit InternLMImpl(const ModelOptions& o);
  // Directly on init.device in the final dtypes, filled by init.h's counter-based generator from
  // (init.seed, parameter index, element index): no host copy of the weights, the same weights on
  // every rank and at every world size. What loom-train builds on CUDA (on the CPU: InternLM(o)).
  InternLMImpl(const ModelOptions& o, const ModelInit& init);
  // logits [B, T, V] fp32. Tokens must lie in [0, V).
  torch::Tensor forward(const Batch& b);
  // forward() without the head: the final norm's output [B, T, C] fp32, for a loss that applies
  // the head itself chunk by chunk (chunked_loss.h). forward(b) = linear(hidden_states(b), head_weight()).
  torch::Tensor hidden_states(const Batch& b);
  // The head's weight [V, C]: output.weight, or tok_embeddings.weight when tie_embeddings.
  torch::Tensor head_weight() const;
  int64_t num_parameters();
  const ModelOptions& options() const { return o_; }
  // Called around the decoder layers of every forward from now on (nullptr: none); not owned.
  void set_layer_hooks(LayerHooks* hooks) { hooks_ = hooks; }
  // The varlen attention kernel of every forward from now on (attention_select.h makes the run's;
  // empty: the masked math path, what a model starts with).
  void set_attention(VarlenAttentionFn kernel) { attention_ = std::move(kernel); }

  Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  Linear output{nullptr};  // null when tie_embeddings

 private:
  // Registers the modules, their parameters allocated with t (the final norm in fp32 on t's device).
  void build(const torch::TensorOptions& t);
  // InternLM's init of every parameter: from torch's default generator, or from init_key(*seed, i).
  void reset_parameters(const std::optional<uint64_t>& seed);
  ModelOptions o_;
  std::vector<DecoderLayer> layer_list_;
  LayerHooks* hooks_ = nullptr;
  VarlenAttentionFn attention_;
};
TORCH_MODULE(InternLM);

}  // namespace loom
