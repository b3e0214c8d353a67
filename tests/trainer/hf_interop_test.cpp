// HF interoperability: the mapping table, export -> import round trips, the exported files read
// by numpy (the lines of docs/HF.md) and by an independent float64 LLaMA forward in torch, and the
// refusals (unmappable configs, lying safetensors headers, inconsistent shard indexes).
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "hf_export.h"
#include "hf_import.h"
#include "hf_mapping.h"
#include "hf_tokenizer.h"
#include "loom/spm_model.h"
#include "loom/error.h"
#include "loom/hash.h"
#include "loom/sys.h"
#include "model.h"
#include "safetensors.h"
#include "test_util.h"

using namespace loom;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

ModelOptions small_options(bool qkv_bias, bool out_bias, bool tied = false, int64_t kv_heads = 2) {
  ModelOptions o;
  o.hidden_size = 64;
  o.num_layers = 2;
  o.num_attention_heads = 4;
  o.num_kv_attention_heads = kv_heads;
  o.vocab_size = 1000;  // spm_test_unigram_1k.model
  o.qkv_bias = qkv_bias;
  o.out_bias = out_bias;
  o.tie_embeddings = tied;
  return o;
}

// A model whose every tensor (biases and norms too) holds distinct random values, so a mapping
// that swaps or drops anything shows.
InternLM random_model(const ModelOptions& o, uint64_t seed) {
  torch::manual_seed(seed);
  InternLM m(o);
  torch::NoGradGuard g;
  for (auto& p : m->named_parameters()) {
    if (p.key().find("norm") != std::string::npos) p.value().copy_(1 + 0.2 * torch::randn_like(p.value()));
    else p.value().copy_(0.3 * torch::randn_like(p.value()));
  }
  return m;
}

std::map<std::string, torch::Tensor> state_of(InternLM& m) {
  std::map<std::string, torch::Tensor> s;
  for (auto& p : m->named_parameters()) s[p.key()] = p.value().detach().clone();
  return s;
}

std::string spm_1k() { return test::test_data_dir() + "/spm_test_unigram_1k.model"; }


const std::vector<int64_t> kIds = {1, 17, 999, 250, 3, 3, 640, 42, 7, 512, 88, 2};

// Replaces the first occurrence of from by to (same length: the header length stays valid).
void patch_file(const std::string& path, const std::string& from, const std::string& to) {
  std::string s = test::read_all(path);
  const size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  s.replace(at, from.size(), to);
  test::write_all(path, s);
}

}  // namespace

TEST_CASE("hf architecture follows the bias table and refuses an o bias alone") {
  CHECK(hf::architecture_for(small_options(false, false)).name == "LlamaForCausalLM");
  CHECK_FALSE(hf::architecture_for(small_options(false, false)).attention_bias);
  CHECK(hf::architecture_for(small_options(true, true)).name == "LlamaForCausalLM");
  CHECK(hf::architecture_for(small_options(true, true)).attention_bias);
  CHECK(hf::architecture_for(small_options(true, false)).name == "Qwen2ForCausalLM");
  CHECK(hf::architecture_for(small_options(true, false)).model_type == "qwen2");
  CHECK_THROWS_WITH(hf::architecture_for(small_options(false, true)),
                    Catch::Matchers::Equals("export-hf: model.out_bias=true with model.qkv_bias=false has no HF "
                                            "LLaMA-family architecture (LLaMA's attention_bias covers q, k, v and o "
                                            "together; Qwen2 biases q, k, v only); see docs/HF.md"));
}

TEST_CASE("hf config json parses back to the same model shape") {
  for (const auto& [qkv, out, tied, kv] : std::vector<std::tuple<bool, bool, bool, int64_t>>{
           {true, true, false, 4}, {true, false, true, 2}, {false, false, false, 1}}) {
    ModelOptions o = small_options(qkv, out, tied, kv);
    o.rope_base = 500000.0;
    o.norm_eps = 1e-6;
    o.mlp_ratio = 3.5;  // F = 256
    hf::TokenSettings t;
    t.max_positions = 4096;
    const hf::ParsedConfig p = hf::parse_config(hf::config_json(o, t, torch::kBFloat16), "config.json");
    CHECK(p.model.hidden_size == 64);
    CHECK(p.model.num_layers == 2);
    CHECK(p.model.num_attention_heads == 4);
    CHECK(p.model.kv_heads() == kv);
    CHECK(p.model.ffn_hidden() == o.ffn_hidden());
    CHECK(p.model.vocab_size == 1000);
    CHECK(p.model.norm_eps == 1e-6);
    CHECK(p.model.rope_base == 500000.0);
    CHECK(p.model.qkv_bias == qkv);
    CHECK(p.model.out_bias == out);
    CHECK(p.model.tie_embeddings == tied);
    CHECK(p.model.dtype == torch::kBFloat16);
    CHECK(p.tokens.bos_id == 1);
    CHECK(p.tokens.eos_id == 2);
    CHECK(p.tokens.pad_id == -1);
    CHECK(p.tokens.max_positions == 4096);
    CHECK(p.arch.name == hf::architecture_for(o).name);
  }
  // InternLM-7B's MLP: F = 11008 = 43 * 256 survives the ratio round trip.
  ModelOptions big = small_options(true, true);
  big.hidden_size = 4096;
  big.num_attention_heads = 32;
  big.num_kv_attention_heads = 32;
  big.mlp_ratio = 8.0 / 3.0;
  REQUIRE(big.ffn_hidden() == 11008);
  CHECK(hf::parse_config(hf::config_json(big, {}, torch::kFloat32), "c").model.ffn_hidden() == 11008);
}

TEST_CASE("hf parse_config refuses configurations loom cannot represent") {
  const std::string good = hf::config_json(small_options(true, true), {}, torch::kFloat32);
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  CHECK_THROWS_WITH(hf::parse_config(with("\"model_type\": \"llama\"", "\"model_type\": \"mistral\""), "D/config.json"),
                    StartsWith("D/config.json: model_type 'mistral' is not supported; loom imports model_type llama "
                               "or qwen2 (see docs/HF.md)"));
  CHECK_THROWS_WITH(hf::parse_config(with("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\""), "c.json"),
                    StartsWith("c.json: hidden_act 'gelu' is not supported (loom's MLP is SwiGLU: silu)"));
  CHECK_THROWS_WITH(hf::parse_config(with("\"mlp_bias\": false", "\"mlp_bias\": true"), "c.json"),
                    StartsWith("c.json: mlp_bias is true; loom's MLP has no biases"));
  CHECK_THROWS_WITH(hf::parse_config(with("\"head_dim\": 16", "\"head_dim\": 32"), "c.json"),
                    StartsWith("c.json: head_dim 32 differs from hidden_size / num_attention_heads = 16; loom cannot "
                               "represent that"));
  CHECK_THROWS_WITH(hf::parse_config(with("\"intermediate_size\": 256", "\"intermediate_size\": 200"), "c.json"),
                    StartsWith("c.json: intermediate_size 200 is not a positive multiple of 256; loom's MLP width is "
                               "256 * ceil(hidden_size * mlp_ratio / 256)"));
  CHECK_THROWS_WITH(hf::parse_config(with("\"rope_type\": \"default\"", "\"rope_type\": \"linear\""), "c.json"),
                    StartsWith("c.json: rope_parameters.rope_type 'linear' is not supported; loom's rotary embedding "
                               "has no scaling (rope_type default)"));
  CHECK_THROWS_WITH(hf::parse_config(with("\"use_cache\": true", "\"rope_scaling\": {\"factor\": 2.0}"), "c.json"),
                    StartsWith("c.json: rope_scaling is set; loom's rotary embedding has no scaling"));
  CHECK_THROWS_WITH(hf::parse_config(with("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3"), "c.json"),
                    StartsWith("c.json: the configuration does not make a valid loom model: model.num_attention_heads "
                               "(4) must be a multiple of model.num_kv_attention_heads (3)"));
  CHECK_THROWS_WITH(hf::parse_config("{\"model_type\": ", "c.json"), StartsWith("c.json: not valid JSON: "));
  const std::string qwen = hf::config_json(small_options(true, false), {}, torch::kFloat32);
  std::string sliding = qwen;
  sliding.replace(sliding.find("\"use_sliding_window\": false"), 27, "\"use_sliding_window\": true ");
  CHECK_THROWS_WITH(hf::parse_config(sliding, "q.json"),
                    StartsWith("q.json: use_sliding_window is true; loom's attention is full causal attention"));
}

TEST_CASE("hf to_hf splits wqkv by rows and from_hf joins it back bitwise") {
  for (const auto& [qkv, out, tied] : std::vector<std::tuple<bool, bool, bool>>{
           {true, true, false}, {true, false, true}, {false, false, false}}) {
    const ModelOptions o = small_options(qkv, out, tied);
    InternLM m = random_model(o, 7);
    const auto loom_state = state_of(m);
    const hf::NamedTensors h = hf::to_hf(loom_state, o);
    std::map<std::string, torch::Tensor> hm(h.begin(), h.end());
    // 2 layers x (q k v o gate up down + 2 norms) + embed + norm (+ head) (+ q/k/v bias) (+ o bias).
    CHECK(h.size() == size_t(2 * (9 + (qkv ? 3 : 0) + (out ? 1 : 0)) + 2 + (tied ? 0 : 1)));
    const torch::Tensor& wqkv = loom_state.at("layers.1.attention.wqkv.weight");  // rows 64 q, 32 k, 32 v
    CHECK(torch::equal(hm.at("model.layers.1.self_attn.q_proj.weight"), wqkv.narrow(0, 0, 64)));
    CHECK(torch::equal(hm.at("model.layers.1.self_attn.k_proj.weight"), wqkv.narrow(0, 64, 32)));
    CHECK(torch::equal(hm.at("model.layers.1.self_attn.v_proj.weight"), wqkv.narrow(0, 96, 32)));
    if (qkv) {
      CHECK(torch::equal(hm.at("model.layers.0.self_attn.k_proj.bias"),
                         loom_state.at("layers.0.attention.wqkv.bias").narrow(0, 64, 32)));
    }
    CHECK(torch::equal(hm.at("model.layers.0.mlp.gate_proj.weight"), loom_state.at("layers.0.feed_forward.w1.weight")));
    CHECK(torch::equal(hm.at("model.layers.0.mlp.up_proj.weight"), loom_state.at("layers.0.feed_forward.w2.weight")));
    CHECK(torch::equal(hm.at("model.layers.0.mlp.down_proj.weight"), loom_state.at("layers.0.feed_forward.w3.weight")));
    CHECK(torch::equal(hm.at("model.layers.1.post_attention_layernorm.weight"),
                       loom_state.at("layers.1.ffn_norm.weight")));
    CHECK(hm.count("lm_head.weight") == (tied ? 0u : 1u));
    CHECK(hm.count("model.layers.0.self_attn.o_proj.bias") == (out ? 1u : 0u));

    const hf::NamedTensors back = hf::from_hf(hm, o, "D");
    REQUIRE(back.size() == loom_state.size());
    for (const auto& [name, t] : back) {
      INFO(name);
      CHECK(torch::equal(t, loom_state.at(name)));
    }
  }
}

TEST_CASE("hf from_hf names a missing, misshapen or unexpected tensor") {
  const ModelOptions o = small_options(true, true);
  InternLM m = random_model(o, 3);
  const hf::NamedTensors h = hf::to_hf(state_of(m), o);
  std::map<std::string, torch::Tensor> hm(h.begin(), h.end());

  auto missing = hm;
  missing.erase("model.layers.1.self_attn.v_proj.bias");
  CHECK_THROWS_WITH(hf::from_hf(missing, o, "D"),
                    StartsWith("D: missing tensor 'model.layers.1.self_attn.v_proj.bias' (expected shape [32])"));
  auto misshapen = hm;
  misshapen["model.layers.0.mlp.up_proj.weight"] = torch::zeros({256, 63});
  CHECK_THROWS_WITH(hf::from_hf(misshapen, o, "D"),
                    StartsWith("D: tensor 'model.layers.0.mlp.up_proj.weight' has shape [256, 63], expected [256, 64]"));
  auto extra = hm;
  extra["model.layers.0.mlp.gate_proj.bias"] = torch::zeros({256});
  CHECK_THROWS_WITH(hf::from_hf(extra, o, "D"),
                    StartsWith("D: unexpected tensor 'model.layers.0.mlp.gate_proj.bias' (not part of a biased "
                               "LLaMA-family model of this config; see docs/HF.md)"));
  auto with_inv_freq = hm;  // older transformers saved this buffer; it is recomputed, not loaded
  with_inv_freq["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch::zeros({8});
  // Per layer the six q/k/v weights and biases become wqkv's weight and bias.
  CHECK(hf::from_hf(with_inv_freq, o, "D").size() == hm.size() - 2 * (6 - 2));
}

TEST_CASE("hf export then import round trips bitwise") {
  for (const auto& [qkv, out, dtype, shard] : std::vector<std::tuple<bool, bool, torch::Dtype, uint64_t>>{
           {true, true, torch::kFloat32, 5ull << 30},
           {true, false, torch::kBFloat16, 5ull << 30},
           {false, false, torch::kFloat32, 100000}}) {
    ModelOptions o = small_options(qkv, out);
    o.dtype = dtype;
    InternLM m = random_model(o, 11);
    const auto before = state_of(m);
    test::TempDir tmp("hf_roundtrip");
    hf::ExportOptions eo;
    eo.output_dir = tmp / "out";
    eo.tokenizer = spm_1k();
    eo.max_shard_bytes = shard;
    const hf::ExportSummary s = hf::export_hf(before, o, eo);
    CHECK(s.files.back() == "config.json");
    const bool sharded = shard < (5ull << 30);
    CHECK(sys::exists(eo.output_dir + "/model.safetensors") == !sharded);
    CHECK(sys::exists(eo.output_dir + "/model.safetensors.index.json") == sharded);
    if (sharded) {
      // 1000x64 fp32 = 256000 bytes: embedding and head each alone, 65536-byte MLP matrices mostly
      // alone, the rest packed up to 100000 bytes: 9 shards.
      CHECK(sys::exists(eo.output_dir + "/model-00001-of-00009.safetensors"));
      CHECK(sys::exists(eo.output_dir + "/model-00009-of-00009.safetensors"));
      CHECK_FALSE(sys::exists(eo.output_dir + "/model-00010-of-00009.safetensors"));
    }
    CHECK(test::read_all(eo.output_dir + "/tokenizer.model") == test::read_all(spm_1k()));

    const hf::LoadedWeights w = hf::load_hf(eo.output_dir);
    CHECK(w.tokenizer == eo.output_dir + "/tokenizer.model");
    CHECK(w.tokens.bos_id == 1);
    CHECK(w.tokens.eos_id == 2);
    CHECK(w.model.dtype == dtype);
    REQUIRE(w.tensors.size() == before.size());
    for (const auto& [name, t] : before) {
      INFO(name);
      const torch::Tensor& got = w.tensors.at(name);  // bf16: loom's final norm stays fp32 both ways
      CHECK(got.scalar_type() == (name == "norm.weight" ? torch::kFloat32 : dtype));
      CHECK(torch::equal(got, t));
    }
    // The imported model computes exactly what the exported one did.
    InternLM m2(w.model);
    hf::load_into(*m2, w.tensors, w.dir);
    m->eval();
    m2->eval();
    torch::NoGradGuard ng;
    const Batch b = single_document(kIds);
    CHECK(torch::equal(m->forward(b), m2->forward(b)));
  }
}

TEST_CASE("hf rerun of an export leaves exactly what a first run does") {
  const ModelOptions o = small_options(true, true);
  InternLM m = random_model(o, 5);
  test::TempDir tmp("hf_rerun");
  hf::ExportOptions eo;
  eo.output_dir = tmp / "out";
  eo.tokenizer = spm_1k();
  eo.max_shard_bytes = 100000;
  hf::export_hf(state_of(m), o, eo);
  REQUIRE(sys::exists(eo.output_dir + "/model-00003-of-00009.safetensors"));
  test::write_all(eo.output_dir + "/README.md", "not ours");
  eo.max_shard_bytes = 5ull << 30;
  hf::export_hf(state_of(m), o, eo);
  std::vector<std::string> names;
  for (const auto& f : sys::list_files(eo.output_dir)) names.push_back(sys::basename(f));
  CHECK(names == std::vector<std::string>{"README.md", "config.json", "generation_config.json", "model.safetensors",
                                          "special_tokens_map.json", "tokenizer.model", "tokenizer_config.json"});
  const std::string first = test::read_all(eo.output_dir + "/model.safetensors");
  hf::export_hf(state_of(m), o, eo);
  CHECK(test::read_all(eo.output_dir + "/model.safetensors") == first);
}

TEST_CASE("hf export refuses what does not map and writes nothing") {
  const ModelOptions o = small_options(false, true);
  InternLM m = random_model(o, 1);
  test::TempDir tmp("hf_refuse");
  hf::ExportOptions eo;
  eo.output_dir = tmp / "out";
  CHECK_THROWS_WITH(hf::export_hf(state_of(m), o, eo),
                    StartsWith("export-hf: model.out_bias=true with model.qkv_bias=false has no HF"));
  CHECK_FALSE(sys::exists(eo.output_dir));

  const ModelOptions ok = small_options(true, true);
  InternLM m2 = random_model(ok, 1);
  auto state = state_of(m2);
  state.erase("layers.1.ffn_norm.weight");
  CHECK_THROWS_WITH(hf::export_hf(state, ok, eo),
                    StartsWith("export-hf: missing tensor 'layers.1.ffn_norm.weight' (expected shape [64])"));
  auto mixed = state_of(m2);
  mixed["layers.0.attention.wo.weight"] = mixed["layers.0.attention.wo.weight"].to(torch::kBFloat16);
  CHECK_THROWS_WITH(hf::export_hf(mixed, ok, eo),
                    StartsWith("export-hf: tensor 'model.layers.0.self_attn.o_proj.weight' is BFloat16 while the "
                               "embedding is Float; pass --dtype to export in one dtype"));
  CHECK_FALSE(sys::exists(eo.output_dir + "/config.json"));
}

TEST_CASE("hf exported tokenizer files name the SentencePiece special pieces") {
  const ModelOptions o = small_options(true, true);
  InternLM m = random_model(o, 2);
  test::TempDir tmp("hf_tok");
  hf::ExportOptions eo;
  eo.output_dir = tmp / "out";
  eo.tokenizer = spm_1k();
  eo.max_positions = 512;
  hf::export_hf(state_of(m), o, eo);
  const std::string cfg = test::read_all(eo.output_dir + "/tokenizer_config.json");
  // The one class transformers 4 and 5 both resolve (hf_tokenizer.cpp says why).
  CHECK_THAT(cfg, Contains("\"tokenizer_class\": \"LlamaTokenizer\""));
  CHECK_THAT(cfg, !Contains("special_tokens_pattern"));
  CHECK_THAT(cfg, Contains("\"bos_token\": \"<s>\""));
  CHECK_THAT(cfg, Contains("\"eos_token\": \"</s>\""));
  CHECK_THAT(cfg, Contains("\"unk_token\": \"<unk>\""));
  CHECK_THAT(cfg, Contains("\"pad_token\": null"));
  CHECK_THAT(cfg, Contains("\"model_max_length\": 512"));
  CHECK(test::read_all(eo.output_dir + "/special_tokens_map.json") ==
        "{\n  \"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n  \"unk_token\": \"<unk>\"\n}\n");
  CHECK(test::read_all(eo.output_dir + "/generation_config.json") ==
        "{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2\n}\n");
  // A tokenizer larger than the model's vocabulary cannot go with it.
  ModelOptions tiny = small_options(true, true);
  tiny.vocab_size = 500;
  InternLM mt = random_model(tiny, 2);
  CHECK_THROWS_WITH(hf::export_hf(state_of(mt), tiny, eo),
                    StartsWith("export-hf: the tokenizer " + spm_1k() + " has 1000 pieces, more than model.vocab_size 500"));
}

TEST_CASE("hf exported safetensors read by numpy with the documented lines equal the weights") {
  // The python block of docs/HF.md, run as documented: every tensor's float32 bytes hashed.
  const std::string doc = test::read_all(test::source_dir() + "/docs/HF.md");
  const size_t head = doc.find("### Reading the weights with numpy");
  REQUIRE(head != std::string::npos);
  const size_t begin = doc.find("```python\n", head);
  REQUIRE(begin != std::string::npos);
  const size_t end = doc.find("```", begin + 10);
  const std::string reader = doc.substr(begin + 10, end - begin - 10);

  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    ModelOptions o = small_options(true, false, true);
    o.dtype = dtype;
    InternLM m = random_model(o, 13);
    const auto state = state_of(m);
    test::TempDir tmp("hf_numpy");
    hf::ExportOptions eo;
    eo.output_dir = tmp / "out";
    eo.max_shard_bytes = dtype == torch::kFloat32 ? 100000 : (5ull << 30);
    eo.dtype = dtype == torch::kFloat32 ? "keep" : "bfloat16";
    hf::export_hf(state, o, eo);
    test::write_all(tmp / "read.py", reader + R"(
import sys, xxhash
w = read_hf_folder(sys.argv[1])
for name in sorted(w):
    a = np.ascontiguousarray(w[name], dtype=np.float32)
    print(name, list(a.shape), xxhash.xxh64(a.tobytes()).intdigest())
)");
    const test::RunResult r = test::run(test::python() + " " + test::quote(tmp / "read.py") + " " + test::quote(eo.output_dir));
    REQUIRE(r.exit_code == 0);
    std::string want;
    std::map<std::string, std::string> lines;
    for (const auto& [name, t] : hf::to_hf(state, o)) {
      const torch::Tensor f = t.to(dtype).to(torch::kFloat32).contiguous();
      std::string shape = "[";
      for (int64_t i = 0; i < f.dim(); ++i) shape += (i ? ", " : "") + std::to_string(f.size(i));
      lines[name] = name + " " + shape + "] " + std::to_string(xxh64(f.data_ptr(), f.numel() * 4)) + "\n";
    }
    for (const auto& kv : lines) want += kv.second;
    CHECK(r.output == want);
  }
}

TEST_CASE("hf export computes what an independent float64 LLaMA forward of its files computes") {
  // tests/trainer/hf_llama_reference.py implements HF's LLaMA/Qwen2 forward from the HF names alone.
  for (const auto& [qkv, out, tied, kv] : std::vector<std::tuple<bool, bool, bool, int64_t>>{
           {true, true, false, 4}, {true, false, false, 2}, {false, false, true, 1}}) {
    const ModelOptions o = small_options(qkv, out, tied, kv);
    InternLM m = random_model(o, 21);
    test::TempDir tmp("hf_ref");
    hf::ExportOptions eo;
    eo.output_dir = tmp / "out";
    hf::export_hf(state_of(m), o, eo);
    std::string ids;
    for (int64_t id : kIds) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const test::RunResult r = test::run(test::python() + " " +
                                        test::quote(test::source_dir() + "/tests/trainer/hf_llama_reference.py") +
                                        " " + test::quote(eo.output_dir) + " " + ids + " " + test::quote(tmp / "ref.f64"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string raw = test::read_all(tmp / "ref.f64");
    const int64_t T = static_cast<int64_t>(kIds.size());
    REQUIRE(raw.size() == size_t(T * 1000 * 8));
    const torch::Tensor ref = torch::from_blob(const_cast<char*>(raw.data()), {T, 1000}, torch::kFloat64).clone();
    m->eval();
    torch::NoGradGuard ng;
    const torch::Tensor got = m->forward(single_document(kIds))[0].to(torch::kFloat64);
    const double diff = (got - ref).abs().max().item<double>();
    const double scale = ref.abs().max().item<double>();
    INFO("qkv_bias " << qkv << " out_bias " << out << " tied " << tied << " kv " << kv << ": max |diff| " << diff
                     << " of max |logit| " << scale);
    CHECK(diff < 1e-4 * std::max(1.0, scale));  // float32 forward vs float64: ~1e-6 relative in practice
    CHECK(torch::equal(got.argmax(-1), ref.argmax(-1)));
  }
}

TEST_CASE("hf import refuses lying safetensors headers and inconsistent shard indexes") {
  const ModelOptions o = small_options(true, true);
  InternLM m = random_model(o, 17);
  test::TempDir tmp("hf_lies");
  hf::ExportOptions eo;
  eo.output_dir = tmp / "out";
  hf::export_hf(state_of(m), o, eo);
  const std::string file = eo.output_dir + "/model.safetensors";
  const std::string pristine = test::read_all(file);

  SECTION("a dtype that does not match the byte range") {
    patch_file(file, "\"model.embed_tokens.weight\":{\"dtype\":\"F32\"", "\"model.embed_tokens.weight\":{\"dtype\":\"F16\"");
    CHECK_THROWS_WITH(hf::load_hf(eo.output_dir),
                      StartsWith(file + ": tensor 'model.embed_tokens.weight' is F16 of 64000 elements = 128000 bytes, "
                                 "but data_offsets [0, 256000) hold 256000"));
  }
  SECTION("a shape that does not match the byte range") {
    patch_file(file, "\"shape\":[1000,64]", "\"shape\":[1000,65]");
    CHECK_THROWS_WITH(hf::load_hf(eo.output_dir),
                      StartsWith(file + ": tensor 'model.embed_tokens.weight' is F32 of 65000 elements = 260000 bytes, "
                                 "but data_offsets [0, 256000) hold 256000"));
  }
  SECTION("a file shorter than its header says") {
    test::write_all(file, pristine.substr(0, pristine.size() - 4));
    CHECK_THROWS_WITH(hf::load_hf(eo.output_dir), StartsWith(file + ": tensor 'lm_head.weight' ends at data byte "));
  }
  SECTION("a tensor of the right size but the wrong shape for the model") {
    patch_file(file, "\"model.layers.0.mlp.up_proj.weight\":{\"dtype\":\"F32\",\"shape\":[256,64]",
               "\"model.layers.0.mlp.up_proj.weight\":{\"dtype\":\"F32\",\"shape\":[64,256]");
    CHECK_THROWS_WITH(hf::load_hf(eo.output_dir),
                      StartsWith(eo.output_dir + ": tensor 'model.layers.0.mlp.up_proj.weight' has shape [64, 256], "
                                 "expected [256, 64]"));
  }
  SECTION("an index that places a tensor in another shard") {
    eo.max_shard_bytes = 100000;
    hf::export_hf(state_of(m), o, eo);
    const std::string index = eo.output_dir + "/model.safetensors.index.json";
    patch_file(index, "\"model.norm.weight\": \"model-00008-of-00009.safetensors\"",
               "\"model.norm.weight\": \"model-00007-of-00009.safetensors\"");
    CHECK_THROWS_WITH(hf::load_hf(eo.output_dir),
                      StartsWith(eo.output_dir + "/model-00008-of-00009.safetensors: holds tensor 'model.norm.weight' "
                                 "which model.safetensors.index.json places in model-00007-of-00009.safetensors"));
  }
  SECTION("an index that names a missing shard") {
    eo.max_shard_bytes = 100000;
    hf::export_hf(state_of(m), o, eo);
    sys::remove_file(eo.output_dir + "/model-00002-of-00009.safetensors");
    CHECK_THROWS_WITH(hf::load_hf(eo.output_dir),
                      Contains(eo.output_dir + "/model-00002-of-00009.safetensors") && Contains("No such file"));
  }
  SECTION("no weights at all") {
    sys::remove_file(file);
    CHECK_THROWS_WITH(hf::load_hf(eo.output_dir),
                      StartsWith(eo.output_dir + ": no model.safetensors and no model.safetensors.index.json; expected "
                                 "an HF model folder (loom-train export-hf writes one)"));
  }
}

TEST_CASE("hf init_from_hf loads matching weights and lists every shape difference") {
  const ModelOptions o = small_options(true, true);
  InternLM src = random_model(o, 23);
  test::TempDir tmp("hf_init");
  hf::ExportOptions eo;
  eo.output_dir = tmp / "out";
  hf::export_hf(state_of(src), o, eo);

  InternLM dst = random_model(o, 99);
  hf::init_from_hf(*dst, eo.output_dir);
  const auto a = state_of(src), b = state_of(dst);
  for (const auto& [name, t] : a) CHECK(torch::equal(t, b.at(name)));

  ModelOptions other = o;
  other.num_layers = 3;
  other.out_bias = false;
  InternLM wrong(other);
  CHECK_THROWS_WITH(hf::init_from_hf(*wrong, eo.output_dir),
                    StartsWith("--init-from-hf " + eo.output_dir + ": the model configuration differs from the HF "
                               "model's:\n  model.num_layers = 3 here, 2 in " + eo.output_dir +
                               "/config.json\n  model.out_bias = 0 here, 1 in " + eo.output_dir + "/config.json"));
}

TEST_CASE("hf SentencePiece model reader and decoder agree with Python's sentencepiece") {
  for (const std::string model : {"spm_test_unigram_1k.model", "internlm_v7.model"}) {
    const std::string path = test::test_data_dir() + "/" + model;
    const spm::SpmModel m = spm::read_spm_model(path);
    // Python encodes a line of Botchan and a Japanese sentence; we decode the ids it printed.
    const test::RunResult r = test::run(
        test::python() + " -c " +
        test::quote("import sentencepiece as s\n"
                    "p = s.SentencePieceProcessor(model_file='" + path + "')\n"
                    "print(p.vocab_size(), p.bos_id(), p.eos_id(), p.unk_id(), p.pad_id(), p.id_to_piece(p.vocab_size() - 1))\n"
                    "for t in ['I was born in the country, ten miles off.', '\u4eca\u65e5\u306f\u3044\u3044\u5929\u6c17 x']:\n"
                    "    ids = [p.bos_id()] + p.encode(t) + [p.eos_id()]\n"
                    "    print(','.join(map(str, ids)))\n"
                    "    print(p.decode(ids))\n"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::istringstream lines(r.output);
    std::string head, ids_line, text;
    std::getline(lines, head);
    CHECK(head == std::to_string(m.size()) + " " + std::to_string(m.bos_id) + " " + std::to_string(m.eos_id) + " " +
                      std::to_string(m.unk_id) + " " + std::to_string(m.pad_id) + " " + m.pieces.back());
    while (std::getline(lines, ids_line) && std::getline(lines, text)) {
      std::vector<int64_t> ids;
      std::istringstream is(ids_line);
      for (std::string item; std::getline(is, item, ',');) ids.push_back(std::stoll(item));
      CHECK(spm::decode(m, ids) == text);
    }
  }
  test::TempDir tmp("hf_spm_bad");
  test::write_all(tmp / "bad.model", std::string("\x0a\x7f\x0a", 3));
  CHECK_THROWS_WITH(spm::read_spm_model(tmp / "bad.model"),
                    StartsWith(tmp / "bad.model" + ": field of 127 bytes at byte 2 runs past its message (1 bytes left); "
                               "not a SentencePiece model"));
}
