// Generation: the KV-cache path against the training forward recomputed over the whole text, eos,
// and the sampler (greedy ties, seeds, the nucleus, frequencies against the softmax).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "generate.h"
#include "hf_export.h"
#include "kv_cache.h"
#include "loom/error.h"
#include "model.h"
#include "test_util.h"

using namespace loom;
using Catch::Matchers::StartsWith;

namespace {

// Weights drawn wide (std 0.5) so the logits spread out and greedy choices are far from ties that
// float rounding could flip.
InternLM wide_model(bool qkv_bias, bool out_bias, int64_t kv_heads, bool tied, uint64_t seed) {
  ModelOptions o;
  o.hidden_size = 64;
  o.num_layers = 3;
  o.num_attention_heads = 4;
  o.num_kv_attention_heads = kv_heads;
  o.vocab_size = 300;
  o.qkv_bias = qkv_bias;
  o.out_bias = out_bias;
  o.tie_embeddings = tied;
  torch::manual_seed(seed);
  InternLM m(o);
  torch::NoGradGuard g;
  for (auto& p : m->named_parameters()) {
    if (p.key().find("norm") != std::string::npos) p.value().copy_(1 + 0.1 * torch::randn_like(p.value()));
    else p.value().copy_(0.5 * torch::randn_like(p.value()) / std::sqrt(double(p.value().size(-1))) * 4);
  }
  m->eval();
  return m;
}

}  // namespace

TEST_CASE("hf generate greedy with the kv cache gives the tokens of the full forward recomputed each step") {
  for (const auto& [qkv, out, kv, tied] : std::vector<std::tuple<bool, bool, int64_t, bool>>{
           {true, true, 4, false}, {true, false, 2, true}, {false, false, 1, false}}) {
    InternLM m = wide_model(qkv, out, kv, tied, 31);
    GenerateOptions o;
    o.max_new_tokens = 40;
    const std::vector<int64_t> prompt = {1, 45, 210, 7, 7, 99};
    o.use_cache = true;
    const Generation cached = generate(*m, prompt, o);
    o.use_cache = false;
    const Generation full = generate(*m, prompt, o);
    INFO("qkv_bias " << qkv << " out_bias " << out << " kv heads " << kv << " tied " << tied);
    REQUIRE(cached.tokens.size() == 40u);
    CHECK(cached.tokens == full.tokens);
    CHECK_FALSE(cached.stopped_at_eos);
    // The prompt pass of the cache path is the training forward to float rounding.
    const double diff = (cached.prompt_logits - full.prompt_logits).abs().max().item<double>();
    CHECK(diff < 1e-4);
    // Not a degenerate model that repeats one token: the test would prove little.
    std::set<int64_t> distinct(cached.tokens.begin(), cached.tokens.end());
    CHECK(distinct.size() > 5);
  }
}

TEST_CASE("hf forward_cached one token at a time equals the forward over the whole sequence") {
  InternLM m = wide_model(true, true, 2, false, 5);
  const std::vector<int64_t> ids = {1, 5, 9, 200, 17, 3, 250, 0, 42};
  const int64_t T = static_cast<int64_t>(ids.size());
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  KVCache cache(*m, 1, T);
  // First three in one call, then one at a time: each chunk sees the cached positions.
  std::vector<torch::Tensor> parts;
  parts.push_back(forward_cached(*m, torch::tensor(std::vector<int64_t>(ids.begin(), ids.begin() + 3), i64).view({1, 3}),
                                 cache, false)[0]);
  for (int64_t t = 3; t < T; ++t) parts.push_back(forward_cached(*m, torch::full({1, 1}, ids[t], i64), cache, false)[0]);
  CHECK(cache.length() == T);
  const torch::Tensor got = torch::cat(parts, 0);

  torch::NoGradGuard ng;
  const torch::Tensor want = m->forward(single_document(ids))[0];
  CHECK((got - want).abs().max().item<double>() < 1e-4);

  CHECK_THROWS_WITH(forward_cached(*m, torch::full({1, 1}, int64_t{3}, i64), cache),
                    StartsWith("forward_cached: 9 cached + 1 new positions exceed the cache's 9"));
  KVCache fresh(*m, 1, 4);
  CHECK_THROWS_WITH(forward_cached(*m, torch::full({1, 1}, int64_t{300}, i64), fresh),
                    StartsWith("token ids must lie in [0, 300), got 300..300"));
}

TEST_CASE("hf generate stops at eos and includes it") {
  InternLM m = wide_model(true, true, 4, false, 31);
  GenerateOptions o;
  o.max_new_tokens = 40;
  const std::vector<int64_t> prompt = {1, 45, 210, 7, 7, 99};
  const Generation free_run = generate(*m, prompt, o);
  REQUIRE(free_run.tokens.size() == 40u);
  o.eos_id = free_run.tokens[4];
  const size_t first = std::find(free_run.tokens.begin(), free_run.tokens.end(), o.eos_id) - free_run.tokens.begin();
  const Generation stopped = generate(*m, prompt, o);
  CHECK(stopped.stopped_at_eos);
  CHECK(stopped.tokens == std::vector<int64_t>(free_run.tokens.begin(), free_run.tokens.begin() + first + 1));
  o.max_new_tokens = 0;
  CHECK(generate(*m, prompt, o).tokens.empty());
  CHECK_THROWS_WITH(generate(*m, {}, o), StartsWith("generate: the prompt has no tokens"));
}

TEST_CASE("hf token sampler is greedy at temperature 0 and follows the nucleus above it") {
  GenerateOptions o;
  // Greedy: the first maximum wins a tie.
  TokenSampler greedy(o);
  CHECK(greedy.next(torch::tensor({0.5f, 2.0f, 2.0f, -1.0f})) == 1);

  // Temperature 1, top_p 1: frequencies follow softmax(logits) = (0.5, 0.3, 0.2).
  const torch::Tensor logits = torch::tensor({std::log(0.3f), std::log(0.5f), std::log(0.2f)});
  o.temperature = 1.0;
  o.seed = 1234;
  TokenSampler s(o);
  const int n = 20000;
  std::vector<int> count(3, 0);
  std::vector<int64_t> first_run;
  for (int i = 0; i < n; ++i) {
    const int64_t t = s.next(logits);
    count[t]++;
    if (i < 50) first_run.push_back(t);
  }
  // Binomial standard deviation at n = 20000 is below 0.0036: 0.015 is over four of them.
  CHECK(std::abs(count[0] / double(n) - 0.3) < 0.015);
  CHECK(std::abs(count[1] / double(n) - 0.5) < 0.015);
  CHECK(std::abs(count[2] / double(n) - 0.2) < 0.015);

  // The same seed draws the same tokens; another seed other ones.
  TokenSampler again(o);
  std::vector<int64_t> second_run;
  for (int i = 0; i < 50; ++i) second_run.push_back(again.next(logits));
  CHECK(first_run == second_run);
  o.seed = 99;
  TokenSampler other(o);
  std::vector<int64_t> third_run;
  for (int i = 0; i < 50; ++i) third_run.push_back(other.next(logits));
  CHECK(first_run != third_run);

  // top_p 0.7: the nucleus is {1 (0.5), 0 (0.3)}, renormalised to (0.375, 0.625); 2 never comes.
  o.top_p = 0.7;
  TokenSampler nucleus(o);
  std::vector<int> c(3, 0);
  for (int i = 0; i < n; ++i) c[nucleus.next(logits)]++;
  CHECK(c[2] == 0);
  CHECK(std::abs(c[0] / double(n) - 0.375) < 0.015);
  // A tiny top_p keeps only the most likely token: greedy.
  o.top_p = 1e-6;
  TokenSampler tiny(o);
  for (int i = 0; i < 100; ++i) CHECK(tiny.next(logits) == 1);
  // A high temperature flattens: token 2 (0.2 at T=1) comes near a third of the time at T=100.
  o.top_p = 1.0;
  o.temperature = 100.0;
  TokenSampler hot(o);
  int twos = 0;
  for (int i = 0; i < n; ++i) twos += hot.next(logits) == 2;
  CHECK(std::abs(twos / double(n) - 1.0 / 3) < 0.02);

  o.top_p = 0;
  CHECK_THROWS_WITH(TokenSampler(o), StartsWith("--top-p must be in (0, 1], got 0"));
  o.top_p = 1;
  o.temperature = -1;
  CHECK_THROWS_WITH(TokenSampler(o), StartsWith("--temperature must be >= 0 (0 = greedy), got -1"));
}

TEST_CASE("hf generate samples reproducibly from a seed") {
  InternLM m = wide_model(true, true, 4, false, 8);
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.temperature = 0.8;
  o.top_p = 0.9;
  o.seed = 7;
  const std::vector<int64_t> prompt = {1, 2, 3};
  const Generation a = generate(*m, prompt, o);
  const Generation b = generate(*m, prompt, o);
  CHECK(a.tokens == b.tokens);
  o.use_cache = false;  // the same draws from the same logits
  CHECK(generate(*m, prompt, o).tokens == a.tokens);
  o.use_cache = true;
  o.seed = 8;
  CHECK(generate(*m, prompt, o).tokens != a.tokens);
}

namespace {

// Captures std::cout for the lifetime of the object (run_generate prints its results there).
class CoutCapture {
 public:
  CoutCapture() : old_(std::cout.rdbuf(buf_.rdbuf())) {}
  ~CoutCapture() { std::cout.rdbuf(old_); }
  CoutCapture(const CoutCapture&) = delete;
  CoutCapture& operator=(const CoutCapture&) = delete;
  std::string text() const { return buf_.str(); }

 private:
  std::ostringstream buf_;
  std::streambuf* old_;
};

// The value after "key: " on its own line of out, "" if absent.
std::string line_value(const std::string& out, const std::string& key) {
  std::istringstream is(out);
  for (std::string line; std::getline(is, line);)
    if (line.rfind(key + ": ", 0) == 0) return line.substr(key.size() + 2);
  return "";
}

}  // namespace

TEST_CASE("hf generate --prompt encodes the text with the folder's tokenizer, bos first", "[spm]") {
  // A small random model exported with the demo's tokenizer (vocab 2000).
  ModelOptions mo;
  mo.hidden_size = 32;
  mo.num_layers = 1;
  mo.num_attention_heads = 4;
  mo.num_kv_attention_heads = 4;
  mo.vocab_size = 2000;
  torch::manual_seed(3);
  InternLM m(mo);
  std::map<std::string, torch::Tensor> state;
  for (auto& p : m->named_parameters()) state[p.key()] = p.value().detach().clone();
  test::TempDir tmp("hf_gen_prompt");
  hf::ExportOptions eo;
  eo.output_dir = tmp / "hf";
  eo.tokenizer = test::source_dir() + "/data_samples/spm_2k.model";
  hf::export_hf(state, mo, eo);

  std::string out;
  {
    CoutCapture cap;
    CHECK(run_generate({"--hf", eo.output_dir, "--prompt", "It was a fine day, and the", "--max-new-tokens", "4"}) ==
          0);
    out = cap.text();
  }
  INFO(out);
  // Python sentencepiece 0.1.97: [bos_id()] + encode("It was a fine day, and the") with spm_2k.model.
  CHECK(line_value(out, "prompt ids") == "1,879,318,296,427,401,280,557,289,323,272,306,275");
  const std::string ids = line_value(out, "ids");
  CHECK(std::count(ids.begin(), ids.end(), ',') == 3);  // 4 new tokens (eos unlikely from 2000 random logits)
  CHECK(line_value(out, "text").rfind("It was a fine day, and the", 0) == 0);

  // Exactly one of the two prompt forms; ids must fit the model.
  CHECK_THROWS_WITH(run_generate({"--hf", eo.output_dir, "--prompt", "x", "--prompt-ids", "1,2"}),
                    Catch::Matchers::Contains("pass exactly one of --prompt TEXT and --prompt-ids 1,2,3"));
  CHECK_THROWS_WITH(run_generate({"--hf", eo.output_dir}),
                    Catch::Matchers::Contains("pass exactly one of --prompt TEXT and --prompt-ids 1,2,3"));
  CHECK_THROWS_WITH(run_generate({"--hf", eo.output_dir, "--prompt-ids", "1,2000"}),
                    Catch::Matchers::Contains("prompt token id 2000 is outside the model's vocabulary of 2000"));
}
