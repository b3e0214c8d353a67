#include "hf_import.h"

#include <simdjson.h>

#include <optional>
#include <set>
#include <vector>

#include "checkpoint.h"
#include "config.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/sys.h"
#include "safetensors.h"

namespace loom::hf {

namespace {

// weight name -> file, from model.safetensors.index.json, every file checked to exist.
std::map<std::string, std::string> read_index(const std::string& dir) {
  const std::string path = dir + "/model.safetensors.index.json";
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  auto err = parser.load(path).get(root);
  LOOM_CHECK(!err, path, ": cannot read the safetensors index: ", simdjson::error_message(err));
  simdjson::dom::object map;
  LOOM_CHECK(!root["weight_map"].get(map), path, ": expected an object 'weight_map' {tensor: file}");
  std::map<std::string, std::string> out;
  for (auto kv : map) {
    std::string_view file;
    LOOM_CHECK(!kv.value.get(file), path, ": weight_map entry '", kv.key, "' is not a file name");
    LOOM_CHECK(file.find('/') == std::string_view::npos && !file.empty(), path, ": weight_map entry '", kv.key,
               "' names '", file, "', expected a file in the same folder");
    out[std::string(kv.key)] = std::string(file);
  }
  LOOM_CHECK(!out.empty(), path, ": weight_map is empty");
  return out;
}

// Every tensor of the folder's safetensors files, each checked to be where the index says.
std::map<std::string, torch::Tensor> read_weights(const std::string& dir) {
  std::map<std::string, torch::Tensor> tensors;
  const std::string single = dir + "/model.safetensors";
  if (sys::exists(dir + "/model.safetensors.index.json")) {
    const auto index = read_index(dir);
    std::set<std::string> files;
    for (const auto& kv : index) files.insert(kv.second);
    for (const std::string& f : files) {
      const safetensors::Reader r(dir + "/" + f);
      for (const std::string& name : r.names()) {
        auto it = index.find(name);
        LOOM_CHECK(it != index.end() && it->second == f, r.path(), ": holds tensor '", name,
                   "' which model.safetensors.index.json ", it == index.end() ? "does not list" : "places in " + it->second);
        tensors[name] = r.get(name);
      }
    }
    for (const auto& [name, file] : index)
      LOOM_CHECK(tensors.count(name), dir, "/", file, ": has no tensor '", name,
                 "' although model.safetensors.index.json places it there");
  } else {
    LOOM_CHECK(sys::exists(single), dir, ": no model.safetensors and no model.safetensors.index.json; "
               "expected an HF model folder (loom-train export-hf writes one)");
    const safetensors::Reader r(single);
    for (const std::string& name : r.names()) tensors[name] = r.get(name);
  }
  return tensors;
}

}  // namespace

LoadedWeights load_hf(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  LOOM_CHECK(sys::exists(config_path), dir, ": no config.json; expected an HF model folder");
  const ParsedConfig cfg = parse_config(sys::read_file(config_path), config_path);
  LoadedWeights w;
  w.dir = dir;
  w.model = cfg.model;
  w.tokens = cfg.tokens;
  const std::map<std::string, torch::Tensor> hf = read_weights(dir);
  for (auto& [name, t] : from_hf(hf, cfg.model, dir)) w.tensors[name] = t;
  // The weights decide the dtype the model is built in (config.json's dtype is only a hint).
  w.model.dtype = w.tensors.at("tok_embeddings.weight").scalar_type();
  if (sys::exists(dir + "/tokenizer.model")) w.tokenizer = dir + "/tokenizer.model";
  log::info("import-hf: ", dir, ": ", cfg.arch.name, ", ", w.tensors.size(), " loom tensors, ",
            c10::toString(w.model.dtype));
  return w;
}

LoadedWeights load_loom_checkpoint(const std::string& dir) {
  // A step_N folder has a manifest; a checkpoints folder names its newest in `latest`.
  std::string step_dir = dir;
  if (!sys::exists(dir + "/manifest.json")) {
    LOOM_CHECK(sys::exists(dir + "/latest"), dir, ": neither a checkpoint (no manifest.json) nor a checkpoints "
               "folder (no `latest`); pass a step_N folder or the folder holding them");
    step_dir = Checkpointer(CheckpointOptions{dir, 0}).find_latest_valid();
    LOOM_CHECK(!step_dir.empty(), dir, ": no complete checkpoint found");
  }
  validate_checkpoint(step_dir);
  const std::optional<TrainConfig> cfg = parse_train_config({"--config", step_dir + "/config.ini"});
  LOOM_ASSERT(cfg.has_value(), "a config without --help always parses to a value");
  LoadedWeights w;
  w.dir = step_dir;
  w.model = cfg->model;
  w.tokens.bos_id = w.tokens.eos_id = w.tokens.pad_id = -1;
  const safetensors::Reader r(step_dir + "/model.safetensors");
  for (const std::string& name : r.names()) w.tensors[name] = r.get(name);
  log::info("checkpoint ", step_dir, ": ", w.tensors.size(), " tensors, ", c10::toString(w.model.dtype));
  return w;
}

void load_into(InternLMImpl& model, const std::map<std::string, torch::Tensor>& tensors, const std::string& where) {
  torch::NoGradGuard no_grad;
  std::set<std::string> seen;
  bool cast_said = false;
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    auto it = tensors.find(name);
    LOOM_CHECK(it != tensors.end(), where, ": has no weights for parameter '", name, "'");
    const torch::Tensor& t = it->second;
    LOOM_CHECK(t.sizes() == p.sizes(), where, ": tensor '", name, "' has shape ", t.sizes(), ", the model expects ",
               p.sizes());
    if (t.scalar_type() != p.scalar_type() && !cast_said) {
      log::info(where, ": casting weights from ", c10::toString(t.scalar_type()), " to the model's ",
                c10::toString(p.scalar_type()), " (first: ", name, ")");
      cast_said = true;
    }
    p.copy_(t);
    seen.insert(name);
  }
  for (const auto& kv : tensors)
    LOOM_CHECK(seen.count(kv.first), where, ": tensor '", kv.first, "' is not a parameter of this model");
}

void init_from_hf(InternLMImpl& model, const std::string& dir) {
  const LoadedWeights w = load_hf(dir);
  const ModelOptions& a = model.options();
  const ModelOptions& b = w.model;
  std::string diffs;
  const auto cmp = [&](const char* key, auto x, auto y) {
    if (x != y) diffs += str("\n  model.", key, " = ", x, " here, ", y, " in ", dir, "/config.json");
  };
  cmp("hidden_size", a.hidden_size, b.hidden_size);
  cmp("num_layers", a.num_layers, b.num_layers);
  cmp("num_attention_heads", a.num_attention_heads, b.num_attention_heads);
  cmp("num_kv_attention_heads", a.kv_heads(), b.kv_heads());
  cmp("ffn hidden (mlp_ratio)", a.ffn_hidden(), b.ffn_hidden());
  cmp("vocab_size", a.vocab_size, b.vocab_size);
  cmp("qkv_bias", a.qkv_bias, b.qkv_bias);
  cmp("out_bias", a.out_bias, b.out_bias);
  cmp("tie_embeddings", a.tie_embeddings, b.tie_embeddings);
  cmp("rope_base", a.rope_base, b.rope_base);
  cmp("norm_eps", a.norm_eps, b.norm_eps);
  LOOM_CHECK(diffs.empty(), "--init-from-hf ", dir, ": the model configuration differs from the HF model's:", diffs);
  load_into(model, w.tensors, dir);
  log::info("--init-from-hf: loaded ", w.tensors.size(), " tensors from ", dir);
}

}  // namespace loom::hf
