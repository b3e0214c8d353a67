// The one table between loom's InternLM parameters and the Hugging Face LLaMA family, used by
// export (hf_export.h) and import (hf_import.h) alike.
//
// Which loom configurations map to which HF architecture (anything else is refused):
//   qkv_bias  out_bias   HF architecture
//   false     false      LlamaForCausalLM (model_type llama, attention_bias false)
//   true      true       LlamaForCausalLM (attention_bias true: bias on q, k, v and o) -- InternLM
//   true      false      Qwen2ForCausalLM (model_type qwen2: bias on q, k, v only)
//   false     true       refused: no HF LLaMA-family model has a bias on o alone
// tie_embeddings maps to tie_word_embeddings (lm_head.weight then is not written), GQA to
// num_key_value_heads, rope_base to rope_theta, F = ffn_hidden() to intermediate_size (import
// refuses an intermediate_size that is not a multiple of 256, which loom's F always is).
//
// Names, per layer i (loom -> HF; shapes as in model.h, letters from batch.h):
//   tok_embeddings.weight              model.embed_tokens.weight
//   layers.i.attention_norm.weight     model.layers.i.input_layernorm.weight
//   layers.i.attention.wqkv.weight     rows [0,HD) q_proj, [HD,HD+KD) k_proj, [HD+KD,HD+2KD) v_proj
//   layers.i.attention.wqkv.bias       the same three blocks of model.layers.i.self_attn.{q,k,v}_proj.bias
//   layers.i.attention.wo.weight/bias  model.layers.i.self_attn.o_proj.weight/bias
//   layers.i.ffn_norm.weight           model.layers.i.post_attention_layernorm.weight
//   layers.i.feed_forward.w1.weight    model.layers.i.mlp.gate_proj.weight
//   layers.i.feed_forward.w2.weight    model.layers.i.mlp.up_proj.weight
//   layers.i.feed_forward.w3.weight    model.layers.i.mlp.down_proj.weight
//   norm.weight                        model.norm.weight
//   output.weight                      lm_head.weight
// Rotary: both sides use rotate-half with inv_freq = theta^(-2i/D), so q/k rows are not permuted.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "model.h"

namespace loom::hf {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct Architecture {
  std::string name;        // "LlamaForCausalLM" | "Qwen2ForCausalLM"
  std::string model_type;  // "llama" | "qwen2"
  bool attention_bias = false;  // LLaMA's attention_bias (Qwen2 has none: q/k/v biased, o not)
};

// The HF architecture for o, or loom::Error saying why none fits.
Architecture architecture_for(const ModelOptions& o);

// What config.json says beyond the model shape.
struct TokenSettings {
  int64_t bos_id = 1;
  int64_t eos_id = 2;
  int64_t pad_id = -1;              // -1: null
  int64_t max_positions = 2048;     // max_position_embeddings (loom's training seq_len is a fine value)
};

// config.json for o (dtype: the dtype of the exported weights, "float32" / "bfloat16" / "float16").
std::string config_json(const ModelOptions& o, const TokenSettings& t, torch::Dtype dtype);

struct ParsedConfig {
  ModelOptions model;  // shape keys filled; training-only keys (init, dropout, ...) left at defaults
  TokenSettings tokens;
  Architecture arch;
};
// Parses an HF config.json; path names the file in errors. Refuses what loom cannot represent
// (another model_type, rope scaling, an MLP bias, an activation other than silu, a head_dim other
// than hidden_size / num_attention_heads, sliding-window attention, ...).
ParsedConfig parse_config(const std::string& json, const std::string& path);

// Name and shape of every loom parameter o has, in model order.
std::vector<std::pair<std::string, std::vector<int64_t>>> loom_parameter_shapes(const ModelOptions& o);

// loom tensors (names and shapes exactly those of loom_parameter_shapes, any order) -> HF tensors in
// model order, wqkv split into contiguous q/k/v. Throws naming a missing, extra or misshapen tensor.
NamedTensors to_hf(const std::map<std::string, torch::Tensor>& loom, const ModelOptions& o);

// The inverse: HF tensors (where names the source folder in errors) -> loom tensors in model order.
// Every expected HF tensor must be present with its shape; rotary inv_freq buffers are ignored and
// anything else unexpected is an error.
NamedTensors from_hf(const std::map<std::string, torch::Tensor>& hf, const ModelOptions& o, const std::string& where);

}  // namespace loom::hf
