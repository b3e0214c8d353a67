#include "hf_mapping.h"

#include <simdjson.h>

#include <cmath>
#include <set>
#include <sstream>

#include "loom/error.h"
#include "loom/json_text.h"

namespace loom::hf {

namespace {

// Per-layer tensors that map one to one (the fused wqkv is handled apart). `bias_of` says which
// option enables an optional tensor.
enum class Need { kAlways, kOutBias };
struct LayerRule {
  const char* loom;
  const char* hf;
  Need need;
};
constexpr LayerRule kLayerRules[] = {
    {"attention_norm.weight", "input_layernorm.weight", Need::kAlways},
    {"attention.wo.weight", "self_attn.o_proj.weight", Need::kAlways},
    {"attention.wo.bias", "self_attn.o_proj.bias", Need::kOutBias},
    {"ffn_norm.weight", "post_attention_layernorm.weight", Need::kAlways},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight", Need::kAlways},
    {"feed_forward.w2.weight", "mlp.up_proj.weight", Need::kAlways},
    {"feed_forward.w3.weight", "mlp.down_proj.weight", Need::kAlways},
};
constexpr const char* kQkvParts[] = {"q_proj", "k_proj", "v_proj"};
constexpr const char* kEmbed[] = {"tok_embeddings.weight", "model.embed_tokens.weight"};
constexpr const char* kNorm[] = {"norm.weight", "model.norm.weight"};
constexpr const char* kHead[] = {"output.weight", "lm_head.weight"};

std::string layer_loom(int64_t i, const std::string& suffix) { return str("layers.", i, ".", suffix); }
std::string layer_hf(int64_t i, const std::string& suffix) { return str("model.layers.", i, ".", suffix); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os.str() + "]";
}

// Row counts of q, k, v inside wqkv.
std::vector<int64_t> qkv_rows(const ModelOptions& o) {
  const int64_t D = o.head_dim();
  return {o.num_attention_heads * D, o.kv_heads() * D, o.kv_heads() * D};
}

const torch::Tensor& need(const std::map<std::string, torch::Tensor>& m, const std::string& name,
                          const std::vector<int64_t>& shape, const std::string& where) {
  auto it = m.find(name);
  LOOM_CHECK(it != m.end(), where, ": missing tensor '", name, "' (expected shape ", shape_str(shape), ")");
  LOOM_CHECK(it->second.sizes().vec() == shape, where, ": tensor '", name, "' has shape ",
             shape_str(it->second.sizes().vec()), ", expected ", shape_str(shape));
  return it->second;
}

std::string dtype_string(torch::Dtype d) {
  switch (d) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    default: LOOM_FAIL("export-hf: weights of dtype ", c10::toString(d), " have no HF torch_dtype");
  }
}

// The shortest text that reads back as v (json_number), always a JSON float: 1e-05, 10000.0.
std::string json_double(double v) {
  std::string s = json_number(v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // "n": null stays null
  return s;
}

// ---- config.json reading ----

class ConfigReader {
 public:
  ConfigReader(simdjson::dom::object obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  bool has(const char* key) const {
    simdjson::dom::element e;
    return !obj_[key].get(e) && !e.is_null();
  }
  int64_t integer(const char* key) const {
    int64_t v = 0;
    LOOM_CHECK(!obj_[key].get(v), path_, ": key '", key, "' must be an integer");
    return v;
  }
  int64_t integer_or(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const char* key) const {
    simdjson::dom::element e;
    LOOM_CHECK(!obj_[key].get(e), path_, ": missing key '", key, "'");
    double d = 0;
    int64_t i = 0;
    if (!e.get(d)) return d;
    LOOM_CHECK(!e.get(i), path_, ": key '", key, "' must be a number");
    return static_cast<double>(i);
  }
  std::string string(const char* key) const {
    std::string_view s;
    LOOM_CHECK(!obj_[key].get(s), path_, ": key '", key, "' must be a string");
    return std::string(s);
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    bool b = false;
    LOOM_CHECK(!obj_[key].get(b), path_, ": key '", key, "' must be true or false");
    return b;
  }
  simdjson::dom::object object() const { return obj_; }
  const std::string& path() const { return path_; }

 private:
  simdjson::dom::object obj_;
  std::string path_;
};

}  // namespace

Architecture architecture_for(const ModelOptions& o) {
  if (!o.qkv_bias && !o.out_bias) return {"LlamaForCausalLM", "llama", false};
  if (o.qkv_bias && o.out_bias) return {"LlamaForCausalLM", "llama", true};
  if (o.qkv_bias && !o.out_bias) return {"Qwen2ForCausalLM", "qwen2", false};
  LOOM_FAIL("export-hf: model.out_bias=true with model.qkv_bias=false has no HF LLaMA-family architecture "
            "(LLaMA's attention_bias covers q, k, v and o together; Qwen2 biases q, k, v only); "
            "see docs/HF.md");
}

std::string config_json(const ModelOptions& o, const TokenSettings& t, torch::Dtype dtype) {
  o.validate();
  const Architecture a = architecture_for(o);
  const std::string d = dtype_string(dtype);
  const auto id_or_null = [](int64_t id) { return id >= 0 ? std::to_string(id) : std::string("null"); };
  std::ostringstream js;
  js << "{\n"
     << "  \"architectures\": [\"" << a.name << "\"],\n"
     << "  \"model_type\": \"" << a.model_type << "\",\n"
     << "  \"vocab_size\": " << o.vocab_size << ",\n"
     << "  \"hidden_size\": " << o.hidden_size << ",\n"
     << "  \"intermediate_size\": " << o.ffn_hidden() << ",\n"
     << "  \"num_hidden_layers\": " << o.num_layers << ",\n"
     << "  \"num_attention_heads\": " << o.num_attention_heads << ",\n"
     << "  \"num_key_value_heads\": " << o.kv_heads() << ",\n"
     << "  \"head_dim\": " << o.head_dim() << ",\n"
     << "  \"hidden_act\": \"silu\",\n"
     << "  \"rms_norm_eps\": " << json_double(o.norm_eps) << ",\n"
     // transformers < 5 reads rope_theta, 5.x reads rope_parameters: write both.
     << "  \"rope_theta\": " << json_double(o.rope_base) << ",\n"
     << "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": " << json_double(o.rope_base) << "},\n"
     << "  \"max_position_embeddings\": " << t.max_positions << ",\n"
     << "  \"tie_word_embeddings\": " << (o.tie_embeddings ? "true" : "false") << ",\n"
     << "  \"attention_dropout\": 0.0,\n"
     << "  \"initializer_range\": " << json_double(o.init_std) << ",\n";
  if (a.model_type == "llama") {
    js << "  \"attention_bias\": " << (a.attention_bias ? "true" : "false") << ",\n"
       << "  \"mlp_bias\": false,\n";
  } else {
    js << "  \"use_sliding_window\": false,\n"
       << "  \"max_window_layers\": " << o.num_layers << ",\n";
  }
  js << "  \"bos_token_id\": " << id_or_null(t.bos_id) << ",\n"
     << "  \"eos_token_id\": " << id_or_null(t.eos_id) << ",\n"
     << "  \"pad_token_id\": " << id_or_null(t.pad_id) << ",\n"
     << "  \"use_cache\": true,\n"
     // torch_dtype before transformers 4.56, dtype after.
     << "  \"torch_dtype\": \"" << d << "\",\n"
     << "  \"dtype\": \"" << d << "\"\n"
     << "}\n";
  return js.str();
}

ParsedConfig parse_config(const std::string& json, const std::string& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  auto err = parser.parse(simdjson::padded_string(json)).get(root);
  LOOM_CHECK(!err, path, ": not valid JSON: ", simdjson::error_message(err));
  simdjson::dom::object obj;
  LOOM_CHECK(!root.get(obj), path, ": expected a JSON object at the top");
  const ConfigReader c(obj, path);

  ParsedConfig p;
  const std::string type = c.string("model_type");
  LOOM_CHECK(type == "llama" || type == "qwen2", path, ": model_type '", type,
             "' is not supported; loom imports model_type llama or qwen2 (see docs/HF.md)");
  ModelOptions& m = p.model;
  m.hidden_size = c.integer("hidden_size");
  m.num_layers = c.integer("num_hidden_layers");
  m.num_attention_heads = c.integer("num_attention_heads");
  m.num_kv_attention_heads = c.integer_or("num_key_value_heads", m.num_attention_heads);
  m.vocab_size = c.integer("vocab_size");
  m.norm_eps = c.number("rms_norm_eps");
  LOOM_CHECK(m.hidden_size > 0 && m.num_attention_heads > 0 && m.hidden_size % m.num_attention_heads == 0, path,
             ": hidden_size ", m.hidden_size, " must be a positive multiple of num_attention_heads ",
             m.num_attention_heads);
  if (c.has("head_dim")) {
    LOOM_CHECK(c.integer("head_dim") == m.head_dim(), path, ": head_dim ", c.integer("head_dim"),
               " differs from hidden_size / num_attention_heads = ", m.head_dim(), "; loom cannot represent that");
  }
  const std::string act = c.has("hidden_act") ? c.string("hidden_act") : "silu";
  LOOM_CHECK(act == "silu", path, ": hidden_act '", act, "' is not supported (loom's MLP is SwiGLU: silu)");

  // Rotary: rope_parameters (transformers 5) or rope_theta (+ rope_scaling) before it.
  m.rope_base = 10000.0;
  if (c.has("rope_parameters")) {
    simdjson::dom::object rp;
    LOOM_CHECK(!obj["rope_parameters"].get(rp), path, ": rope_parameters must be an object");
    const ConfigReader r(rp, path + " rope_parameters");
    const std::string rt = r.has("rope_type") ? r.string("rope_type") : "default";
    LOOM_CHECK(rt == "default", path, ": rope_parameters.rope_type '", rt,
               "' is not supported; loom's rotary embedding has no scaling (rope_type default)");
    if (r.has("rope_theta")) m.rope_base = r.number("rope_theta");
  } else if (c.has("rope_theta")) {
    m.rope_base = c.number("rope_theta");
  }
  LOOM_CHECK(!c.has("rope_scaling"), path, ": rope_scaling is set; loom's rotary embedding has no scaling");

  const int64_t inter = c.integer("intermediate_size");
  LOOM_CHECK(inter > 0 && inter % 256 == 0, path, ": intermediate_size ", inter,
             " is not a positive multiple of 256; loom's MLP width is 256 * ceil(hidden_size * mlp_ratio / 256)");
  m.mlp_ratio = static_cast<double>(inter) / static_cast<double>(m.hidden_size);
  LOOM_ASSERT(m.ffn_hidden() == inter, "mlp_ratio ", m.mlp_ratio, " gives F ", m.ffn_hidden(), " not ", inter);

  m.tie_embeddings = c.boolean_or("tie_word_embeddings", false);
  if (type == "llama") {
    const bool bias = c.boolean_or("attention_bias", false);
    m.qkv_bias = bias;
    m.out_bias = bias;
    LOOM_CHECK(!c.boolean_or("mlp_bias", false), path, ": mlp_bias is true; loom's MLP has no biases");
    p.arch = {"LlamaForCausalLM", "llama", bias};
  } else {
    m.qkv_bias = true;
    m.out_bias = false;
    LOOM_CHECK(!c.boolean_or("use_sliding_window", false), path,
               ": use_sliding_window is true; loom's attention is full causal attention");
    p.arch = {"Qwen2ForCausalLM", "qwen2", false};
  }
  const std::string dt = c.has("dtype") ? c.string("dtype") : c.has("torch_dtype") ? c.string("torch_dtype") : "float32";
  m.dtype = parse_dtype(dt);
  p.tokens.bos_id = c.integer_or("bos_token_id", -1);
  p.tokens.eos_id = c.integer_or("eos_token_id", -1);
  p.tokens.pad_id = c.integer_or("pad_token_id", -1);
  p.tokens.max_positions = c.integer_or("max_position_embeddings", 2048);
  try {
    m.validate();
  } catch (const Error& e) {
    LOOM_FAIL(path, ": the configuration does not make a valid loom model: ", e.what());
  }
  return p;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> loom_parameter_shapes(const ModelOptions& o) {
  const int64_t C = o.hidden_size, V = o.vocab_size, F = o.ffn_hidden();
  const int64_t HD = o.num_attention_heads * o.head_dim(), KD = o.kv_heads() * o.head_dim();
  std::vector<std::pair<std::string, std::vector<int64_t>>> s;
  s.push_back({kEmbed[0], {V, C}});
  for (int64_t i = 0; i < o.num_layers; ++i) {
    s.push_back({layer_loom(i, "attention_norm.weight"), {C}});
    s.push_back({layer_loom(i, "attention.wqkv.weight"), {HD + 2 * KD, C}});
    if (o.qkv_bias) s.push_back({layer_loom(i, "attention.wqkv.bias"), {HD + 2 * KD}});
    s.push_back({layer_loom(i, "attention.wo.weight"), {C, HD}});
    if (o.out_bias) s.push_back({layer_loom(i, "attention.wo.bias"), {C}});
    s.push_back({layer_loom(i, "ffn_norm.weight"), {C}});
    s.push_back({layer_loom(i, "feed_forward.w1.weight"), {F, C}});
    s.push_back({layer_loom(i, "feed_forward.w2.weight"), {F, C}});
    s.push_back({layer_loom(i, "feed_forward.w3.weight"), {C, F}});
  }
  s.push_back({kNorm[0], {C}});
  if (!o.tie_embeddings) s.push_back({kHead[0], {V, C}});
  return s;
}

NamedTensors to_hf(const std::map<std::string, torch::Tensor>& loom, const ModelOptions& o) {
  architecture_for(o);  // refuses what does not map before any work
  const std::string where = "export-hf";
  const auto shapes = loom_parameter_shapes(o);
  std::map<std::string, std::vector<int64_t>> want(shapes.begin(), shapes.end());
  for (const auto& [name, t] : loom)
    LOOM_CHECK(want.count(name), where, ": the checkpoint has tensor '", name,
               "' which the model configuration does not (wrong config for these weights?)");

  const auto get = [&](const std::string& name) -> const torch::Tensor& { return need(loom, name, want.at(name), where); };
  const std::vector<int64_t> rows = qkv_rows(o);
  NamedTensors out;
  out.push_back({kEmbed[1], get(kEmbed[0])});
  for (int64_t i = 0; i < o.num_layers; ++i) {
    for (const char* kind : {"weight", "bias"}) {
      if (std::string(kind) == "bias" && !o.qkv_bias) continue;
      const torch::Tensor& fused = get(layer_loom(i, str("attention.wqkv.", kind)));
      int64_t at = 0;
      for (int part = 0; part < 3; ++part) {
        out.push_back({layer_hf(i, str("self_attn.", kQkvParts[part], ".", kind)),
                       fused.narrow(0, at, rows[part]).contiguous()});
        at += rows[part];
      }
    }
    for (const LayerRule& r : kLayerRules) {
      if (r.need == Need::kOutBias && !o.out_bias) continue;
      out.push_back({layer_hf(i, r.hf), get(layer_loom(i, r.loom))});
    }
  }
  out.push_back({kNorm[1], get(kNorm[0])});
  if (!o.tie_embeddings) out.push_back({kHead[1], get(kHead[0])});
  return out;
}

NamedTensors from_hf(const std::map<std::string, torch::Tensor>& hf, const ModelOptions& o, const std::string& where) {
  const auto shapes = loom_parameter_shapes(o);
  const std::map<std::string, std::vector<int64_t>> want(shapes.begin(), shapes.end());
  const int64_t C = o.hidden_size;
  const std::vector<int64_t> rows = qkv_rows(o);
  std::set<std::string> used;
  const auto get = [&](const std::string& name, const std::vector<int64_t>& shape) -> const torch::Tensor& {
    used.insert(name);
    return need(hf, name, shape, where);
  };
  const auto one = [&](const std::string& loom_name, const std::string& hf_name) {
    return std::make_pair(loom_name, get(hf_name, want.at(loom_name)));
  };

  NamedTensors out;
  out.push_back(one(kEmbed[0], kEmbed[1]));
  for (int64_t i = 0; i < o.num_layers; ++i) {
    for (const char* kind : {"weight", "bias"}) {
      const bool is_bias = std::string(kind) == "bias";
      if (is_bias && !o.qkv_bias) continue;
      std::vector<torch::Tensor> parts;
      for (int part = 0; part < 3; ++part) {
        std::vector<int64_t> shape{rows[part]};
        if (!is_bias) shape.push_back(C);
        parts.push_back(get(layer_hf(i, str("self_attn.", kQkvParts[part], ".", kind)), shape));
      }
      LOOM_CHECK(parts[0].scalar_type() == parts[1].scalar_type() && parts[0].scalar_type() == parts[2].scalar_type(),
                 where, ": layer ", i, " q/k/v_proj.", kind, " have different dtypes; they form one fused tensor");
      out.push_back({layer_loom(i, str("attention.wqkv.", kind)), torch::cat(parts, 0)});
    }
    for (const LayerRule& r : kLayerRules) {
      if (r.need == Need::kOutBias && !o.out_bias) continue;
      out.push_back(one(layer_loom(i, r.loom), layer_hf(i, r.hf)));
    }
  }
  out.push_back(one(kNorm[0], kNorm[1]));
  if (!o.tie_embeddings) out.push_back(one(kHead[0], kHead[1]));

  const std::string inv_freq = "rotary_emb.inv_freq";
  for (const auto& [name, t] : hf) {
    if (used.count(name)) continue;
    if (name.size() >= inv_freq.size() && name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0)
      continue;  // older transformers saved the rotary table; loom recomputes it
    if (name == kHead[1] && o.tie_embeddings) {
      LOOM_CHECK(t.equal(hf.at(kEmbed[1])), where, ": tie_word_embeddings is true but lm_head.weight differs from "
                 "model.embed_tokens.weight");
      continue;
    }
    LOOM_FAIL(where, ": unexpected tensor '", name, "' (not part of a ", o.qkv_bias ? "biased" : "bias-free",
              " LLaMA-family model of this config; see docs/HF.md)");
  }
  return out;
}

}  // namespace loom::hf
