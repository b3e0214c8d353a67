#include "model.h"

#include <cmath>

#include "activation_checkpoint.h"
#include "fused_ops.h"
#include "loom/error.h"
#include "size_limits.h"
#include "weight_grad.h"

namespace loom {

// ---- options ----

int64_t ModelOptions::ffn_hidden() const {
  // InternLM: int(hidden * mlp_ratio) rounded up to a multiple of 256. Within the size limits the
  // product is at most 2^26; outside them the cast would be undefined.
  constexpr int64_t kMultiple = 256;
  const double product = static_cast<double>(hidden_size) * mlp_ratio;
  LOOM_CHECK(product >= 0 && product <= static_cast<double>(kMaxHiddenSize) * kMaxMlpRatio,
             "model.hidden_size x model.mlp_ratio = ", product, " is outside [0, ", kMaxHiddenSize, " x ", kMaxMlpRatio,
             "]");
  const auto raw = static_cast<int64_t>(product);
  return kMultiple * ((raw + kMultiple - 1) / kMultiple);
}

int64_t ModelOptions::checkpointed_layers() const {
  // The nudge keeps k / N (model.checkpoint=auto's fractions) at exactly k layers despite rounding.
  return static_cast<int64_t>(static_cast<double>(num_layers) * checkpoint + 1e-9);
}

void ModelOptions::validate() const {
  // The sizes first (size_limits.h): the checks below and the parameter count compute with them.
  check_size_key("model.hidden_size", hidden_size, kMaxHiddenSize);
  check_size_key("model.num_layers", num_layers, kMaxNumLayers);
  check_size_key("model.vocab_size", vocab_size, kMaxVocabSize);
  LOOM_CHECK(mlp_ratio > 0 && mlp_ratio <= kMaxMlpRatio, "model.mlp_ratio must be in (0, ", kMaxMlpRatio, "], got ",
             mlp_ratio, " (loom-train's size limits: docs/TRAIN.md)");
  LOOM_CHECK(num_attention_heads > 0, "model.num_attention_heads must be positive, got ", num_attention_heads);
  LOOM_CHECK(hidden_size % num_attention_heads == 0, "model.hidden_size (", hidden_size,
             ") must be a multiple of model.num_attention_heads (", num_attention_heads, ")");
  LOOM_CHECK(head_dim() % 2 == 0, "the head dim model.hidden_size / model.num_attention_heads = ", head_dim(),
             " must be even for rotary embeddings");
  LOOM_CHECK(num_kv_attention_heads >= 0, "model.num_kv_attention_heads must be >= 0 (0 = num_attention_heads), got ",
             num_kv_attention_heads);
  LOOM_CHECK(num_attention_heads % kv_heads() == 0, "model.num_attention_heads (", num_attention_heads,
             ") must be a multiple of model.num_kv_attention_heads (", kv_heads(), ")");
  LOOM_CHECK(norm_eps > 0, "model.norm_eps must be positive, got ", norm_eps);
  LOOM_CHECK(init_std > 0, "model.init_std must be positive, got ", init_std);
  LOOM_CHECK(dropout >= 0 && dropout < 1, "model.dropout must be in [0, 1), got ", dropout);
  LOOM_CHECK(checkpoint >= 0 && checkpoint <= 1, "model.checkpoint must be a fraction in [0, 1], got ", checkpoint);
  LOOM_CHECK(checkpoint_margin >= 0 && checkpoint_margin < 1, "model.checkpoint_margin must be in [0, 1), got ",
             checkpoint_margin);
  LOOM_CHECK(rope_base > 0, "model.rope_base must be positive, got ", rope_base);
  LOOM_CHECK(!fp8 || dtype == torch::kBFloat16, "model.precision=fp8 needs model.dtype=bfloat16, got ",
             dtype_name(dtype));
  count_parameters(*this);  // throws where the sizes, each within its limit, multiply past 2^63 - 1
}

torch::Dtype parse_dtype(const std::string& name) {
  std::string n = name;
  if (n.rfind("torch.", 0) == 0) n = n.substr(6);
  if (n == "float32" || n == "fp32" || n == "float") return torch::kFloat32;
  if (n == "bfloat16" || n == "bf16") return torch::kBFloat16;
  if (n == "float16" || n == "fp16" || n == "half") return torch::kFloat16;
  LOOM_FAIL("model.dtype: unknown dtype '", name, "' (expected float32, bfloat16 or float16)");
}

std::string dtype_name(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    default: LOOM_ASSERT(false, "dtype_name: unsupported dtype ", dtype);
  }
  return "";
}

namespace {

Size layer_parameters(const ModelOptions& o) {
  const Size C = o.hidden_size, H = o.num_attention_heads, K = o.kv_heads(), D = o.head_dim();
  const Size F = o.ffn_hidden();
  const Size qkv = (H + 2 * K) * D;
  return 2 * C                                   // two norms
         + qkv * C + (o.qkv_bias ? qkv : 0)      // wqkv
         + C * H * D + (o.out_bias ? C : 0)      // wo
         + 3 * C * F;                            // w1, w2, w3
}

Size model_parameters(const ModelOptions& o) {
  const Size C = o.hidden_size, V = o.vocab_size;
  return V * C + o.num_layers * layer_parameters(o) + C + (o.tie_embeddings ? 0 : V * C);
}

// count() as an int64_t, or SizeOverflow naming the keys whose sizes made it too large.
template <typename Count>
int64_t parameters_or_throw(const ModelOptions& o, Count count) {
  try {
    const Size n = count(o);
    if (n.value() <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(n.value());
    throw SizeOverflow(str(n.value(), " exceeds 2^63 - 1"));
  } catch (const SizeOverflow& e) {
    throw SizeOverflow(str("the parameter count of model.hidden_size=", o.hidden_size, " model.num_layers=",
                           o.num_layers, " model.mlp_ratio=", o.mlp_ratio, " model.vocab_size=", o.vocab_size,
                           " does not fit in 64 bits (", e.what(), "): lower one of these keys"));
  }
}

}  // namespace

int64_t count_parameters_per_layer(const ModelOptions& o) { return parameters_or_throw(o, layer_parameters); }

int64_t count_parameters(const ModelOptions& o) { return parameters_or_throw(o, model_parameters); }

// ---- blocks ----

RMSNormImpl::RMSNormImpl(const RMSNormOptions& o, const torch::TensorOptions& t) : o_(o) {
  weight = register_parameter("weight", torch::ones({o.dim}, t));
}

std::vector<torch::Tensor> RMSNormImpl::forward_residual(const torch::Tensor& x, const torch::Tensor& r) {
  return fused_residual_rmsnorm(x, r, weight, o_.eps, feeds_fp8);
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // CUDA, and CPU fp32: one fused pass (fused_ops.h), same math with a single rounding.
  if (((x.is_cuda() && fused_kernels_available()) || cpu_fused_applies(x)) && x.scalar_type() == weight.scalar_type()) {
    return fused_rmsnorm(x, weight, o_.eps, feeds_fp8);
  }
  const torch::Tensor xf = x.to(torch::kFloat32);
  const torch::Tensor normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + o_.eps);
  return weight * normed.to(weight.scalar_type());
}

namespace {

// CUDA: a Linear over [..., C] as one addmm (mm without a bias) on [N, C] (cuBLAS adds the bias
// in the GEMM's epilogue; LibTorch's linear of a 3-d input ran the matmul and then a broadcast
// add_, 4 ms of a 1b step on an H200), whose backward adds the weight gradient inside its GEMM
// over a step's micro-batches (weight_grad.h). Elsewhere, and for FP8 (which does the same in its
// own function), the module itself, so CPU results stay bitwise as they were.
torch::Tensor project(Linear& l, const torch::Tensor& x) {
  if (!x.is_cuda() || x.dim() < 2 || l->fp8) return l->forward(x);
  return accumulating_linear(x, l->weight, l->bias);
}

}  // namespace

AttentionImpl::AttentionImpl(const AttentionOptions& o, const torch::TensorOptions& t) : o_(o) {
  const int64_t D = o.hidden_size / o.num_heads;
  wqkv = register_module("wqkv", Linear(o.hidden_size, (o.num_heads + 2 * o.num_kv_heads) * D, o.qkv_bias, t));
  wo = register_module("wo", Linear(o.num_heads * D, o.hidden_size, o.out_bias, t));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const PackedContext& ctx) {
  const int64_t B = x.size(0), T = x.size(1), H = o_.num_heads, K = o_.num_kv_heads;
  const int64_t D = o_.hidden_size / H;
  const torch::Tensor qkv = project(wqkv, x);
  if (fused_qkv_rotary_applies(qkv)) {
    // One kernel per rotation (CUDA) or one pass over qkv (CPU fp32), and a backward that writes
    // the QKV gradient in one piece.
    const int64_t half = D / 2;
    const std::vector<torch::Tensor> r = fused_qkv_rotary(qkv, H, K, ctx.cos.squeeze(2).narrow(-1, 0, half),
                                                          ctx.sin.squeeze(2).narrow(-1, 0, half),
                                                          /*publish_fp8_amax=*/wqkv->fp8);
    return project(wo, packed_attention(r[0], r[1], r[2], ctx).reshape({B, T, H * D}));
  }
  const torch::Tensor q = apply_rotary(qkv.narrow(-1, 0, H * D).view({B, T, H, D}), ctx);
  const torch::Tensor k = apply_rotary(qkv.narrow(-1, H * D, K * D).view({B, T, K, D}), ctx);
  const torch::Tensor v = qkv.narrow(-1, (H + K) * D, K * D).view({B, T, K, D});
  return project(wo, packed_attention(q, k, v, ctx).reshape({B, T, H * D}));
}

FeedForwardImpl::FeedForwardImpl(const FeedForwardOptions& o, const torch::TensorOptions& t) {
  // w1 and w2 in one allocation, w2's rows after w1's: fused_gated_projection reads them as one
  // [2F, C] weight without a copy.
  const torch::Tensor gate_up = torch::empty({2 * o.ffn_hidden, o.hidden_size}, t);
  w1 = register_module("w1", Linear(gate_up.narrow(0, 0, o.ffn_hidden).detach()));
  w2 = register_module("w2", Linear(gate_up.narrow(0, o.ffn_hidden, o.ffn_hidden).detach()));
  w3 = register_module("w3", Linear(o.ffn_hidden, o.hidden_size, /*bias=*/false, t));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  if (w1->fp8 && fp8_linear_applies(x, w1->weight) && fp8_linear_applies(x, w2->weight)) {
    const std::vector<torch::Tensor> gate_up =
        fp8_linear_pair(x, w1->weight, w2->weight, w1->fp8_cache_weight);  // x quantized once
    return project(w3, fused_swiglu(gate_up[0], gate_up[1], /*publish_fp8_amax=*/w3->fp8));
  }
  // CUDA: one GEMM for both projections and one pass for the gate; CPU fp32: the gate's pass.
  if (fused_gated_projection_applies(x, w1->weight, w2->weight))
    return project(w3, fused_gated_projection(x, w1->weight, w2->weight));
  if ((x.is_cuda() && fused_kernels_available()) || cpu_fused_applies(x))
    return project(w3, fused_swiglu(project(w1, x), project(w2, x)));
  return w3(torch::silu(w1(x)) * w2(x));
}

DecoderLayerImpl::DecoderLayerImpl(const DecoderLayerOptions& o, const torch::TensorOptions& t) : o_(o) {
  attention_norm = register_module("attention_norm", RMSNorm(RMSNormOptions{o.attention.hidden_size, o.norm_eps}, t));
  attention = register_module("attention", Attention(o.attention, t));
  ffn_norm = register_module("ffn_norm", RMSNorm(RMSNormOptions{o.attention.hidden_size, o.norm_eps}, t));
  feed_forward = register_module("feed_forward", FeedForward(o.feed_forward, t));
}

namespace {

bool fused_residual_applies(const torch::Tensor& x, const RMSNorm& norm, double dropout, bool training) {
  return (dropout == 0 || !training) && fused_residual_rmsnorm_applies(x, norm->weight);
}

}  // namespace

bool DecoderLayerImpl::splits_output(const torch::Tensor& x) {
  return !o_.checkpoint && fused_residual_applies(x, attention_norm, o_.dropout, is_training());
}

std::vector<torch::Tensor> DecoderLayerImpl::forward_split(const torch::Tensor& x, const torch::Tensor& pending,
                                                           const PackedContext& ctx) {
  LOOM_ASSERT(splits_output(x), "forward_split on a layer whose output is not split");
  // The residual stream's adds and its gradient's adds inside the norms' kernels.
  const std::vector<torch::Tensor> a = attention_norm->forward_residual(x, pending);               // {x + p, norm}
  const std::vector<torch::Tensor> f = ffn_norm->forward_residual(a[0], attention(a[1], ctx));  // {h, norm(h)}
  return {f[0], feed_forward(f[1])};
}

torch::Tensor DecoderLayerImpl::body(const torch::Tensor& x, const PackedContext& ctx) {
  // Residual dropout draws from the default generator; a checkpointed recompute restores it.
  const auto drop = [this](const torch::Tensor& t) {
    return o_.dropout > 0 ? torch::dropout(t, o_.dropout, is_training()) : t;
  };
  if (fused_residual_applies(x, attention_norm, o_.dropout, is_training())) {
    const std::vector<torch::Tensor> a = attention_norm->forward_residual(x, {});                    // {x, norm(x)}
    const std::vector<torch::Tensor> f = ffn_norm->forward_residual(a[0], attention(a[1], ctx));  // {h, norm(h)}
    return f[0] + feed_forward(f[1]);
  }
  const torch::Tensor h = x + drop(attention(attention_norm(x), ctx));
  return h + drop(feed_forward(ffn_norm(h)));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const PackedContext& ctx) {
  if (!o_.checkpoint) return body(x, ctx);
  return loom::checkpoint([this, ctx](const torch::Tensor& in) { return body(in, ctx); }, x);
}

// ---- the model ----

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

InternLMImpl::InternLMImpl(const ModelOptions& o) : o_(o) {
  o_.validate();
  build(torch::TensorOptions().dtype(torch::kFloat32));
  {
    // The default generator's draws of torch::nn::Embedding and torch::nn::Linear at construction
    // (this model was built from them): reset_parameters() overwrites the values, but the draws
    // it makes next come after these in the stream.
    torch::NoGradGuard no_grad;
    int64_t fan_in = 0;
    for (auto& item : named_parameters()) {
      const std::string& name = item.key();
      torch::Tensor& p = item.value();
      if (name == "tok_embeddings.weight") {
        torch::nn::init::normal_(p);
      } else if (ends_with(name, "norm.weight")) {
        continue;  // torch::ones
      } else if (ends_with(name, ".bias")) {
        const auto bound = 1 / std::sqrt(fan_in);  // fan_in of the Linear's weight, just before
        torch::nn::init::uniform_(p, -bound, bound);
      } else {
        torch::nn::init::kaiming_uniform_(p, std::sqrt(5));
        fan_in = p.size(1);
      }
    }
  }
  reset_parameters(std::nullopt);
  to(o.dtype);
  norm->to(torch::kFloat32);  // the final norm stays fp32 (its output feeds the head at full precision)
}

InternLMImpl::InternLMImpl(const ModelOptions& o, const ModelInit& init) : o_(o) {
  o_.validate();
  build(torch::TensorOptions().dtype(o.dtype).device(init.device));
  reset_parameters(init.seed);
}

void InternLMImpl::build(const torch::TensorOptions& t) {
  const ModelOptions& o = o_;
  const int64_t C = o.hidden_size;
  tok_embeddings = register_module("tok_embeddings", Embedding(o.vocab_size, C, t));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.num_layers; ++i) {
    DecoderLayerOptions lo{AttentionOptions{C, o.num_attention_heads, o.kv_heads(), o.qkv_bias, o.out_bias},
                           FeedForwardOptions{C, o.ffn_hidden()}, o.norm_eps, o.dropout,
                           i < o.checkpointed_layers()};
    layer_list_.push_back(DecoderLayer(lo, t));
    if (o.fp8) {
      DecoderLayer& l = layer_list_.back();
      for (Linear* lin : {&l->attention->wqkv, &l->attention->wo, &l->feed_forward->w1, &l->feed_forward->w2,
                          &l->feed_forward->w3}) {
        (*lin)->fp8 = true;
        (*lin)->fp8_cache_weight = o.fp8_weight_cache;
      }
      l->attention_norm->feeds_fp8 = l->ffn_norm->feeds_fp8 = true;
    }
    layers->push_back(layer_list_.back());
  }
  // The final norm stays fp32: its output feeds the head at full precision.
  norm = register_module("norm", RMSNorm(RMSNormOptions{C, o.norm_eps}, t.dtype(torch::kFloat32)));
  if (!o.tie_embeddings) output = register_module("output", Linear(C, o.vocab_size, /*bias=*/false, t));
}

void InternLMImpl::reset_parameters(const std::optional<uint64_t>& seed) {
  torch::NoGradGuard no_grad;
  const double scaled_std = o_.scaled_init ? o_.init_std / std::sqrt(2.0 * static_cast<double>(o_.num_layers))
                                           : o_.init_std;
  uint64_t index = 0;  // the parameter's position in named_parameters(): its stream with a seed
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (ends_with(name, ".bias")) {
      p.zero_();
    } else if (ends_with(name, "norm.weight")) {
      p.fill_(1.0);
    } else {
      // Output projections: their sum over 2N residual branches stays O(1).
      const bool scaled = ends_with(name, "attention.wo.weight") || ends_with(name, "feed_forward.w3.weight");
      const double std = scaled ? scaled_std : o_.init_std;
      if (seed)
        fill_counter_normal(p, std, init_key(*seed, index));
      else
        p.normal_(0.0, std);
    }
    ++index;
  }
}

torch::Tensor InternLMImpl::forward(const Batch& b) {
  const torch::Tensor head = head_weight();
  return torch::linear(hidden_states(b).to(head.scalar_type()), head).to(torch::kFloat32);
}

torch::Tensor InternLMImpl::head_weight() const {
  return o_.tie_embeddings ? tok_embeddings->weight : output->weight;
}

torch::Tensor InternLMImpl::hidden_states(const Batch& b) {
  LOOM_CHECK(b.tokens.dim() == 2, "model input must be tokens [B, T], got ", b.tokens.sizes());
  // The range check reads the tokens back: on a GPU that would stall every step, and the trainer
  // checks the data's vocabulary against model.vocab_size once at start.
  if (b.tokens.is_cpu()) {
    const auto mm = torch::aminmax(b.tokens);
    const int64_t lo = std::get<0>(mm).item<int64_t>(), hi = std::get<1>(mm).item<int64_t>();
    if (lo < 0 || hi >= o_.vocab_size) {
      const torch::Tensor bad = ((b.tokens < 0) | (b.tokens >= o_.vocab_size)).nonzero()[0].cpu();
      const int64_t row = bad[0].item<int64_t>(), pos = bad[1].item<int64_t>();
      LOOM_FAIL("token id ", b.tokens[row][pos].item<int64_t>(), " at batch row ", row, " position ", pos,
                " is outside the model's vocabulary [0, ", o_.vocab_size, ") (model.vocab_size)");
    }
  }
  const PackedContext ctx = make_packed_context(b, o_.head_dim(), o_.rope_base, attention_);
  if (hooks_) hooks_->begin_forward();
  // The residual stream is h + pending: a layer that splits its output leaves its MLP's output in
  // pending for the next layer's norm to add.
  // CUDA: later micro-batches add the token rows' gradients into the embedding's (fused_ops.h).
  torch::Tensor h = fused_embedding(tok_embeddings->weight, b.tokens), pending;
  for (size_t i = 0; i < layer_list_.size(); ++i) {
    if (hooks_) hooks_->before_layer(static_cast<int64_t>(i));
    DecoderLayer& layer = layer_list_[i];
    std::vector<torch::Tensor> out;
    if (layer->splits_output(h))
      out = layer->forward_split(h, pending, ctx);
    else
      out = {layer(pending.defined() ? h + pending : h, ctx)};
    h = out[0];
    pending = out.size() > 1 ? out[1] : torch::Tensor();
    if (hooks_) hooks_->after_layer(static_cast<int64_t>(i), out);
  }
  if (pending.defined()) h = h + pending;
  return norm(h.to(torch::kFloat32));
}

int64_t InternLMImpl::num_parameters() {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace loom
