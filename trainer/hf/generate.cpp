#include "generate.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <numeric>

#include "checkpoint.h"
#include "hf_import.h"
#include "hf_tokenizer.h"
#include "kv_cache.h"
#include "loom/cli.h"
#include "loom/error.h"
#include "loom/json_text.h"
#include "loom/log.h"
#include "loom/options.h"
#include "loom/progress.h"
#include "safetensors.h"
#include "loom/spm_encoder.h"

namespace loom {

void GenerateOptions::validate() const {
  // Values outside their range are usage errors (exit 2), as the option parser's own.
  const auto check = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError(what);
  };
  check(max_new_tokens >= 0, str("--max-new-tokens must be >= 0, got ", max_new_tokens));
  check(temperature >= 0, str("--temperature must be >= 0 (0 = greedy), got ", temperature));
  check(top_p > 0 && top_p <= 1, str("--top-p must be in (0, 1], got ", top_p));
}

TokenSampler::TokenSampler(const GenerateOptions& o) : o_(o), rng_(o.seed) { o_.validate(); }

int64_t TokenSampler::next(const torch::Tensor& logits) {
  LOOM_ASSERT(logits.dim() == 1, "sampler wants logits [V], got ", logits.sizes());
  const torch::Tensor l = logits.to(torch::kCPU, torch::kFloat64).contiguous();
  const double* x = l.data_ptr<double>();
  const int64_t V = l.numel();
  if (o_.temperature == 0) return static_cast<int64_t>(std::max_element(x, x + V) - x);  // first maximum

  // Softmax of logits / T in double, then the nucleus: most likely first (ties: lower id first).
  const double mx = *std::max_element(x, x + V);
  std::vector<double> p(V);
  double z = 0;
  for (int64_t i = 0; i < V; ++i) z += p[i] = std::exp((x[i] - mx) / o_.temperature);
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  double kept = 0;
  size_t n = 0;
  while (n < order.size() && (n == 0 || kept < o_.top_p * z)) kept += p[order[n++]];
  // A uniform double in [0, 1) from 53 raw bits (std::uniform_real_distribution differs by library).
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * kept;
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += p[order[i]];
    if (u < acc) return order[i];
  }
  return order[n - 1];
}

namespace {

// The whole sequence as one document: the training forward, for the no-cache reference path.
torch::Tensor full_forward(InternLMImpl& model, const std::vector<int64_t>& ids, const torch::Device& dev) {
  return model.forward(single_document(ids).to(dev))[0];  // [T, V]
}

}  // namespace

Generation generate(InternLMImpl& model, const std::vector<int64_t>& prompt, const GenerateOptions& o) {
  o.validate();
  LOOM_CHECK(!prompt.empty(), "generate: the prompt has no tokens");
  torch::NoGradGuard no_grad;
  model.eval();
  const torch::Device dev = model.tok_embeddings->weight.device();
  TokenSampler sampler(o);
  Generation g;
  std::vector<int64_t> ids = prompt;
  const int64_t P = static_cast<int64_t>(prompt.size());

  std::unique_ptr<KVCache> cache;
  torch::Tensor last;  // logits [V] of the newest position
  if (o.use_cache) {
    cache = std::make_unique<KVCache>(model, 1, P + std::max<int64_t>(o.max_new_tokens, 1));
    const auto t = torch::tensor(prompt, torch::TensorOptions().dtype(torch::kInt64)).view({1, P}).to(dev);
    g.prompt_logits = forward_cached(model, t, *cache, /*last_only=*/false)[0];
  } else {
    g.prompt_logits = full_forward(model, ids, dev);
  }
  last = g.prompt_logits[P - 1];
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const int64_t tok = sampler.next(last);
    g.tokens.push_back(tok);
    ids.push_back(tok);
    if (tok == o.eos_id) {
      g.stopped_at_eos = true;
      break;
    }
    if (step + 1 == o.max_new_tokens) break;
    if (o.use_cache) {
      const auto t = torch::full({1, 1}, tok, torch::TensorOptions().dtype(torch::kInt64).device(dev));
      last = forward_cached(model, t, *cache)[0][0];
    } else {
      last = full_forward(model, ids, dev)[static_cast<int64_t>(ids.size()) - 1];
    }
  }
  return g;
}

namespace {

// "1,2,3" -> ids, naming the bad entry.
std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> ids;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, comma - at);
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    LOOM_CHECK(used == item.size() && !item.empty() && v >= 0, "--prompt-ids: entry ", ids.size() + 1, " '", item,
               "' is not a token id (expected comma-separated non-negative integers)");
    ids.push_back(v);
    at = comma + 1;
  }
  return ids;
}

// The command line of `loom-train generate`, beyond GenerateOptions.
struct GenerateArgs {
  std::string checkpoint, hf_dir, prompt, prompt_ids, tokenizer, dump, device = "cpu";
  bool text_prompt = false;  // --prompt (text) rather than --prompt-ids
};

// Parses args into a and o; false for --help.
bool parse_generate_args(const std::vector<std::string>& args, GenerateArgs& a, GenerateOptions& o) {
  OptionParser p("loom-train generate",
                 "loom-train generate (--checkpoint DIR | --hf DIR) (--prompt TEXT | --prompt-ids 1,2,3)\n"
                 "                           [--tokenizer FILE.model] [--max-new-tokens N] [--temperature T] [--top-p P]\n"
                 "                           [--seed S] [--no-kv-cache] [--device D] [--dump-logits FILE]");
  bool no_cache = false;
  p.options().add_options()
      ("checkpoint", po::value(&a.checkpoint), "loom checkpoint: a step_N folder, or a folder with a `latest` pointer")
      ("hf", po::value(&a.hf_dir), "or an HF model folder (export-hf's output, or a LLaMA/Qwen2 model)")
      ("prompt", po::value(&a.prompt), "the prompt as text, encoded with the tokenizer, bos first (as InternLM)")
      ("prompt-ids", po::value(&a.prompt_ids), "or the prompt as token ids, bos included (loom-tokenize's ids)")
      ("tokenizer", po::value(&a.tokenizer), "SentencePiece model to encode and decode with (default: the folder's "
                                              "tokenizer.model; a loom checkpoint has one when its run had data.tokenizer)")
      ("max-new-tokens", po::value(&o.max_new_tokens)->default_value(o.max_new_tokens), "tokens to generate at most")
      ("temperature", value_with_default(&o.temperature, o.temperature), "0 = greedy; else sample from softmax(logits / T)")
      ("top-p", value_with_default(&o.top_p, o.top_p), "nucleus sampling: smallest set of tokens with this much probability")
      ("seed", po::value(&o.seed)->default_value(o.seed), "RNG seed of the sampler")
      ("no-kv-cache", po::bool_switch(&no_cache), "recompute the whole forward each step (slow; a cross-check)")
      ("device", po::value(&a.device)->default_value(a.device), "torch device: cpu, cuda, cuda:1, ...")
      ("dump-logits", po::value(&a.dump), "write prompt ids, prompt logits and generated ids to this safetensors file");
  if (!p.parse(args)) return false;
  log::info("generate: options that differ from the defaults\n", p.changed_ini());
  LOOM_CHECK(a.checkpoint.empty() != a.hf_dir.empty(), "generate: pass exactly one of --checkpoint DIR and --hf DIR");
  LOOM_CHECK(p.has("prompt") != p.has("prompt-ids"), "generate: pass exactly one of --prompt TEXT and --prompt-ids 1,2,3");
  a.text_prompt = p.has("prompt");
  o.use_cache = !no_cache;
  o.validate();  // before any checkpoint is read
  return true;
}

// The tokenizer to use (a.tokenizer, else the checkpoint's recorded one, else the folder's; "" =
// none), read into sp; sets o.eos_id from it, or from the folder when there is none.
void choose_tokenizer(GenerateArgs& a, const hf::LoadedWeights& w, spm::SpmModel& sp, GenerateOptions& o) {
  if (a.hf_dir.empty()) a.tokenizer = checkpoint_tokenizer(w.dir, a.tokenizer);  // checked against the recorded one
  if (a.tokenizer.empty()) a.tokenizer = w.tokenizer;
  if (!a.tokenizer.empty()) {
    sp = spm::read_spm_model(a.tokenizer);
    o.eos_id = sp.eos_id;
  } else {
    o.eos_id = w.tokens.eos_id;
  }
}

// Completes the prompt's token ids (ids holds --prompt-ids' already, parsed before the slow load):
// --prompt is encoded after bos and printed, so a caller can reuse the ids; each id is checked to be
// inside the vocabulary.
void encode_prompt(const GenerateArgs& a, const spm::SpmModel& sp, int64_t vocab_size, std::vector<int64_t>& ids) {
  if (a.text_prompt) {
    LOOM_CHECK(!a.tokenizer.empty(), "generate: --prompt needs a SentencePiece model to encode with; pass --tokenizer "
               "FILE.model (a loom checkpoint records one when its run had data.tokenizer; an HF folder's "
               "tokenizer.model is used when present)");
    const spm::SpmEncoder enc(sp);
    if (sp.bos_id >= 0) ids.push_back(sp.bos_id);
    const std::vector<int64_t> text_ids = enc.encode(a.prompt);
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
    LOOM_CHECK(!ids.empty(), "generate: the prompt '", a.prompt, "' encodes to no tokens and the tokenizer has no bos");
    std::string s;
    for (int64_t t : ids) s += (s.empty() ? "" : ",") + std::to_string(t);
    std::cout << "prompt ids: " << s << "\n";
  }
  for (int64_t id : ids)
    LOOM_CHECK(id < vocab_size, "generate: prompt token id ", id, " is outside the model's vocabulary of ", vocab_size);
}

// The model of w for inference on `device`, holding w's weights.
InternLM inference_model(const hf::LoadedWeights& w, const std::string& device) {
  ModelOptions mo = w.model;
  mo.dropout = 0;
  mo.checkpoint = 0;
  // Every parameter is overwritten by load_into, so the init only has to be cheap. On a GPU: built
  // there in its final dtypes with init.h's device init (the 7B preset: about a second; no fp32
  // host model, no copy to the device). On the CPU the counter-based init is the slower one
  // (116M parameters on 2 cores: about 5 s against 1.4 s for torch's generator), so the model is
  // built as CPU training builds it.
  const torch::Device dev(device);
  InternLM model = dev.is_cpu() ? InternLM(mo) : InternLM(mo, ModelInit{dev, 0});
  hf::load_into(*model, w.tensors, w.dir);
  return model;
}

// Prints the generated ids and, with a tokenizer, the whole text; returns the prompt's text for the
// logits dump ("" without a tokenizer).
std::string print_generation(const GenerateArgs& a, const spm::SpmModel& sp, const std::vector<int64_t>& ids,
                             const Generation& g) {
  std::string out_ids;
  for (int64_t t : g.tokens) out_ids += (out_ids.empty() ? "" : ",") + std::to_string(t);
  std::cout << "ids: " << out_ids << "\n";
  std::string prompt_text;
  if (!a.tokenizer.empty()) {
    prompt_text = a.text_prompt ? a.prompt : spm::decode(sp, ids);  // the text as given (check_logits.py encodes it)
    std::vector<int64_t> all = ids;
    all.insert(all.end(), g.tokens.begin(), g.tokens.end());
    std::cout << "text: " << spm::decode(sp, all) << "\n";
  }
  std::cout.flush();
  return prompt_text;
}

// --dump-logits: prompt ids, prompt logits (fp32) and generated ids, for check_logits.py.
void dump_logits(const std::string& path, const std::vector<int64_t>& ids, const Generation& g,
                 const std::string& prompt_text, double temperature) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  safetensors::write(path,
                     {{"prompt_ids", torch::tensor(ids, i64)},
                      {"prompt_logits", g.prompt_logits.to(torch::kCPU, torch::kFloat32)},
                      {"generated_ids", torch::tensor(g.tokens, i64)}},
                     {{"prompt", prompt_text}, {"temperature", json_number(temperature)}});
  log::info("generate: logits written to ", path);
}

}  // namespace

int run_generate(const std::vector<std::string>& args) {
  GenerateArgs a;
  GenerateOptions o;
  if (!parse_generate_args(args, a, o)) return 0;  // --help
  std::vector<int64_t> ids;
  if (!a.text_prompt) ids = parse_ids(a.prompt_ids);
  const hf::LoadedWeights w = a.hf_dir.empty() ? hf::load_loom_checkpoint(a.checkpoint) : hf::load_hf(a.hf_dir);
  spm::SpmModel sp;
  choose_tokenizer(a, w, sp, o);
  encode_prompt(a, sp, w.model.vocab_size, ids);
  InternLM model = inference_model(w, a.device);

  const auto t0 = std::chrono::steady_clock::now();
  const Generation g = generate(*model, ids, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const std::string prompt_text = print_generation(a, sp, ids, g);
  const double rate = s > 0 ? static_cast<double>(g.tokens.size()) / s : 0.0;
  log::info("generate: ", format_count(ids.size()), " prompt tokens, ", format_count(g.tokens.size()),
            " new tokens in ", format_number(s, 3), " s (", format_number(rate, 3), " tokens/s)",
            g.stopped_at_eos ? ", stopped at eos" : "", o.temperature == 0 ? ", greedy" : ", sampled");
  if (!a.dump.empty()) dump_logits(a.dump, ids, g, prompt_text, o.temperature);
  return 0;
}

}  // namespace loom
