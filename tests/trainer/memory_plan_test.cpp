// The memory plan (trainer/plan/memory_plan.h) against what it must equal exactly: the model's real
// parameter count, the closed-form state sizes of each optimizer mode; and model.checkpoint=auto's
// choice against the plan itself. Its agreement with measured peaks is plan_e2e_test.cpp's (CPU RSS)
// and bench/RESULTS.md's (the H200's allocator).
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/cli.h"
#include "memory_plan.h"
#include "plan_command.h"
#include "model.h"
#include "size_limits.h"

namespace {

using loom::MemoryPlan;
using loom::PlanInputs;

PlanInputs small(torch::Dtype dtype) {
  PlanInputs in;
  in.model.hidden_size = 64;
  in.model.num_layers = 4;
  in.model.num_attention_heads = 8;
  in.model.num_kv_attention_heads = 2;
  in.model.vocab_size = 1000;
  in.model.dtype = dtype;
  in.micro_bsz = 2;
  in.seq_len = 128;
  in.device_bytes = uint64_t{16} << 30;
  return in;
}

// InternLM-7B's shape (configs/internlm_7b.ini).
void internlm_7b_shape(loom::ModelOptions& m) {
  m.hidden_size = 4096;
  m.num_layers = 32;
  m.num_attention_heads = 32;
  m.num_kv_attention_heads = 0;
  m.vocab_size = 103168;
}

}  // namespace

TEST_CASE("memory plan: parameters, gradients and optimizer state are the model's exact sizes", "[plan]") {
  for (const bool tie : {false, true}) {
    PlanInputs in = small(torch::kFloat32);
    in.model.tie_embeddings = tie;
    in.model.qkv_bias = !tie;
    loom::InternLM model(in.model);
    int64_t numel = 0;
    for (const auto& p : model->parameters()) numel += p.numel();
    const MemoryPlan p = loom::plan_memory(in);
    INFO("tie_embeddings " << tie);
    CHECK(p.num_parameters == numel);
    CHECK(p.parameters == static_cast<uint64_t>(numel) * 4);
    CHECK(p.gradients == static_cast<uint64_t>(numel) * 4);
    CHECK(p.optimizer_state == static_cast<uint64_t>(numel) * 8);  // exp_avg, exp_avg_sq; fp32 needs no master
  }
  PlanInputs bf = small(torch::kBFloat16);
  const MemoryPlan b = loom::plan_memory(bf);
  const auto P = static_cast<uint64_t>(b.num_parameters);
  CHECK(b.parameters == 2 * P);
  CHECK(b.gradients == 2 * P);
  CHECK(b.optimizer_state == 12 * P);  // + the fp32 master copy
  // CUDA, replicated: the gradients are released after each update; beside the activations the
  // plan counts what exists at the backward's start (outside the layers, and one layer) or the
  // rest of all of them at its end, whichever is more.
  PlanInputs cu = bf;
  cu.cuda = true;
  cu.attention = loom::AttentionKernel::kFlashVarlen;
  const MemoryPlan c = loom::plan_memory(cu);
  const auto layer = static_cast<uint64_t>(loom::count_parameters_per_layer(cu.model));
  const uint64_t outside = P - 4 * layer;
  CHECK(c.gradients == std::max(2 * (outside + layer), 2 * P > c.activations ? 2 * P - c.activations : 0));
  CHECK(c.gradients < b.gradients);
  // Accumulating over micro-batches, the gradients of the first are whole while the second's
  // forward keeps its activations: all of them count beside the activations.
  for (const int64_t micro_num : {2, 16}) {
    cu.micro_num = micro_num;
    const MemoryPlan acc = loom::plan_memory(cu);
    CHECK(acc.gradients == 2 * P);
    CHECK(acc.total - c.total == 2 * P - c.gradients);
  }
  cu.micro_num = 1;
  // ZeRO-1 over 4 ranks: a quarter of the fp32 master and moments, the fp32 gradient shard, and the
  // reduction buffers of three units plus one unit's gather (the largest unit: the embedding, here
  // larger than a layer).
  bf.world_size = 4;
  bf.zero1 = -1;
  const MemoryPlan z = loom::plan_memory(bf);
  const auto L = static_cast<uint64_t>(loom::count_parameters_per_layer(bf.model)), R = P - 4 * L;
  const uint64_t E = static_cast<uint64_t>(bf.model.vocab_size * bf.model.hidden_size);
  REQUIRE(E > L);
  CHECK(z.zero_shards == 4);
  CHECK(z.optimizer_state == (12 * P + 3) / 4);
  CHECK(z.gradients == 2 * P + (4 * P + 3) / 4);
  CHECK(z.workspace - b.workspace == 12 * E + 2 * E);
  CHECK(z.parameters == b.parameters);
  CHECK(z.total == z.parameters + z.gradients + z.optimizer_state + z.activations + z.logits_and_loss + z.workspace);
  // Stage 2: whole gradients only for the units outside the layers and two layers in flight.
  bf.zero_stage = 2;
  const MemoryPlan z2 = loom::plan_memory(bf);
  CHECK(z2.gradients == (R + 2 * L) * 2 + (4 * P + 3) / 4);
  CHECK(z2.parameters == b.parameters);
  CHECK(z2.optimizer_state == z.optimizer_state);
  // Stage 3: a quarter of the weights, plus what is gathered at once.
  bf.zero_stage = 3;
  const MemoryPlan z3 = loom::plan_memory(bf);
  CHECK(z3.parameters == (P + 3) / 4 * 2 + (R + 3 * L) * 2);
  CHECK(z3.gradients == z2.gradients);
  CHECK(z2.total < z.total);
  // With 4 layers stage 3 gathers nearly all of them at once; with 32 it saves.
  bf.model.num_layers = 32;
  CHECK(loom::plan_memory(bf).total < [&] {
    PlanInputs two = bf;
    two.zero_stage = 2;
    return loom::plan_memory(two).total;
  }());
  CHECK(z3.to_json().find("\"zero_stage\": 3") != std::string::npos);
}

TEST_CASE("memory plan: activations grow with the tokens and shrink with recompute", "[plan]") {
  PlanInputs in = small(torch::kBFloat16);
  in.cuda = true;
  in.attention = loom::AttentionKernel::kFlashVarlen;
  const MemoryPlan a = loom::plan_memory(in);
  in.micro_bsz = 4;
  const MemoryPlan twice = loom::plan_memory(in);
  CHECK(twice.layer_full_bytes == 2 * a.layer_full_bytes);
  in.model.checkpoint = 1;
  const MemoryPlan all = loom::plan_memory(in);
  CHECK(all.checkpointed_layers == 4);
  // Each recomputed layer keeps its input; one layer is live again in backward.
  CHECK(all.activations - twice.activations + 4 * twice.layer_full_bytes ==
        4 * all.layer_checkpointed_bytes + twice.layer_full_bytes);
  CHECK(all.layer_checkpointed_bytes == 4u * 128 * 64 * 2);  // B T C, bf16
  // The masked path keeps B H T T probabilities per layer.
  in.model.checkpoint = 0;
  in.attention = loom::AttentionKernel::kMasked;
  const MemoryPlan masked = loom::plan_memory(in);
  CHECK(masked.layer_full_bytes - twice.layer_full_bytes == 4u * 8 * 128 * 128 * 2 - 4u * 128 * 8 * 4);
  // cuDNN keeps what flash keeps; its backward adds the fp32 dQ accumulator and row sums, B T H (D + 1) 4,
  // and a micro-batch the bias of at most 4 windows (2 * 512 / 257 + 1 = 4) of 256 x 256: two bf16
  // copies (the forward's thread and the recomputing backward's) and the bool mask it comes from.
  in.attention = loom::AttentionKernel::kCudnnSegments;
  const MemoryPlan cudnn = loom::plan_memory(in);
  CHECK(cudnn.layer_full_bytes == twice.layer_full_bytes);
  CHECK(cudnn.activations - twice.activations == 4u * 128 * 8 * (8 + 1) * 4 + 4u * 256 * 256 * (2 * 2 + 1));
}

TEST_CASE("memory plan: model.precision=fp8 adds each kept layer's e4m3 weights, keeps its linears' inputs in e4m3",
          "[plan]") {
  PlanInputs in = small(torch::kBFloat16);
  in.cuda = true;
  in.attention = loom::AttentionKernel::kFlashVarlen;
  const MemoryPlan bf16 = loom::plan_memory(in);
  in.model.fp8 = true;
  const MemoryPlan fp8 = loom::plan_memory(in);
  // wqkv (C x (H + 2K) D), wo (C x C), w1 w2 w3 (3 C F): one byte each, per layer. Per token the
  // linears' inputs go from the norm outputs and the SwiGLU product in bf16 ((2 C + F) 2 bytes) to
  // one byte each of the four inputs (3 C + F: the attention output's copy is extra).
  const int64_t C = 64, H = 8, K = 2, D = 8, F = in.model.ffn_hidden(), tok = in.micro_bsz * in.seq_len;
  const int64_t weights = C * (H + 2 * K) * D + C * C + 3 * C * F;
  const int64_t inputs = tok * (3 * C + F) - tok * (2 * C + F) * 2;
  REQUIRE(inputs < 0);
  const auto diff = [](uint64_t a, uint64_t b) { return static_cast<int64_t>(a) - static_cast<int64_t>(b); };
  CHECK(diff(fp8.layer_full_bytes, bf16.layer_full_bytes) == weights + inputs);
  CHECK(diff(fp8.activations, bf16.activations) == 4 * (weights + inputs));
  // A recomputed layer keeps only its input; the one live again in backward holds its copies.
  in.model.checkpoint = 1;
  const MemoryPlan fp8_all = loom::plan_memory(in);
  in.model.fp8 = false;
  const MemoryPlan bf16_all = loom::plan_memory(in);
  CHECK(diff(fp8_all.activations, bf16_all.activations) == weights + inputs);
  // Rows not a multiple of 16: every linear runs in bf16, so fp8 plans as bf16 does.
  in.seq_len = 100;
  in.micro_bsz = 1;
  const MemoryPlan bf16_odd = loom::plan_memory(in);
  in.model.fp8 = true;
  CHECK(loom::plan_memory(in).activations == bf16_odd.activations);
}

TEST_CASE("memory plan: the FP8 weight cache holds both e4m3 copies of every layer's weights all step", "[plan]") {
  PlanInputs in = small(torch::kBFloat16);
  in.cuda = true;
  in.attention = loom::AttentionKernel::kFlashVarlen;
  in.micro_num = 4;
  in.model.fp8 = true;
  const MemoryPlan plain = loom::plan_memory(in);
  in.model.fp8_weight_cache = true;
  const MemoryPlan cached = loom::plan_memory(in);
  const int64_t C = 64, H = 8, K = 2, D = 8, F = in.model.ffn_hidden(), N = in.model.num_layers;
  const int64_t weights = C * (H + 2 * K) * D + C * C + 3 * C * F;
  const auto diff = [](uint64_t a, uint64_t b) { return static_cast<int64_t>(a) - static_cast<int64_t>(b); };
  // The transposed copy leaves the kept layers' activations for the parameters, with the other copy.
  CHECK(diff(cached.layer_full_bytes, plain.layer_full_bytes) == -weights);
  CHECK(diff(cached.parameters, plain.parameters) == 2 * N * weights);
  CHECK(diff(cached.total, plain.total) == N * weights);
  CHECK(cached.fp8_weight_copies == static_cast<uint64_t>(2 * N * weights));
  CHECK(plain.fp8_weight_copies == 0);
  CHECK(cached.to_text().find("the FP8 linears' e4m3 weights, kept for the step's 4 micro-batches") !=
        std::string::npos);
  CHECK(plain.to_text().find("e4m3") == std::string::npos);
  // Recomputed layers hold theirs too (without the cache only the layer live again in backward does).
  in.model.checkpoint = 1;
  const MemoryPlan cached_all = loom::plan_memory(in);
  in.model.fp8_weight_cache = false;
  const MemoryPlan plain_all = loom::plan_memory(in);
  CHECK(diff(cached_all.total, plain_all.total) == 2 * N * weights - weights);
}

TEST_CASE("memory plan: the FP8 weight cache is on for fp8 runs of several micro-batches without ZeRO", "[plan]") {
  loom::TrainConfig c;
  c.model.fp8 = true;
  c.data.micro_num = 4;
  const loom::AttentionCaps caps{};
  CHECK(loom::plan_inputs(c, 1, 0, caps).model.fp8_weight_cache);
  c.data.micro_num = 1;  // nothing to reuse: no copies held
  CHECK_FALSE(loom::plan_inputs(c, 1, 0, caps).model.fp8_weight_cache);
  c.data.micro_num = 4;
  c.parallel.zero1 = -1;  // ZeRO publishes no maxima, so nothing says when a weight changed
  CHECK_FALSE(loom::plan_inputs(c, 1, 0, caps).model.fp8_weight_cache);
  c.parallel.zero1 = 1;
  c.model.fp8 = false;
  CHECK_FALSE(loom::plan_inputs(c, 1, 0, caps).model.fp8_weight_cache);
}

TEST_CASE("memory plan: the FP8 weight cache is left off where it would recompute layers or not fit", "[plan]") {
  loom::TrainConfig c;
  c.job.device = "cuda";
  c.model.hidden_size = 64;
  c.model.num_layers = 4;
  c.model.num_attention_heads = 8;
  c.model.vocab_size = 1000;
  c.model.dtype = torch::kBFloat16;
  c.model.fp8 = true;
  c.data.micro_bsz = 2;
  c.data.seq_len = 128;
  c.data.micro_num = 4;
  const loom::AttentionCaps caps{};
  // The totals without recompute, with the cache and without it.
  PlanInputs in = loom::plan_inputs(c, 1, 0, caps);
  REQUIRE(in.model.fp8_weight_cache);
  const uint64_t with = loom::plan_memory(in).total;
  in.model.fp8_weight_cache = false;
  const uint64_t without = loom::plan_memory(in).total;
  REQUIRE(with > without);
  // A fixed model.checkpoint: kept where both fit, left off where only the plan without it fits.
  CHECK(loom::plan_for_device(c, 1, with, caps).in.model.fp8_weight_cache);
  const MemoryPlan tight = loom::plan_for_device(c, 1, without, caps);
  CHECK_FALSE(tight.in.model.fp8_weight_cache);
  CHECK(tight.fits);
  // model.checkpoint=auto: left off where keeping it would recompute layers the run need not.
  c.model.checkpoint_auto = true;
  const double keep = 1.0 - c.model.checkpoint_margin;
  const auto device_for = [keep](uint64_t total) { return static_cast<uint64_t>(static_cast<double>(total) / keep) + 1; };
  const MemoryPlan roomy = loom::plan_for_device(c, 1, device_for(with), caps);
  CHECK(roomy.in.model.fp8_weight_cache);
  CHECK(roomy.checkpointed_layers == 0);
  const MemoryPlan cut = loom::plan_for_device(c, 1, device_for(without), caps);
  CHECK_FALSE(cut.in.model.fp8_weight_cache);
  CHECK(cut.checkpointed_layers == 0);
  CHECK(cut.fits);
}

TEST_CASE("memory plan: model.checkpoint=auto picks 0 when all fits, more when memory is cut", "[plan]") {
  PlanInputs in = small(torch::kFloat32);
  in.model.num_layers = 8;
  in.seq_len = 512;
  in.attention = loom::AttentionKernel::kMasked;
  in.margin = 0.1;
  CHECK(loom::auto_checkpoint_fraction(in) == 0.0);
  // A device just too small for no recompute: auto picks the smallest fraction that fits, and one
  // layer fewer does not.
  const MemoryPlan none = loom::plan_memory(in);
  in.device_bytes = static_cast<uint64_t>(static_cast<double>(none.total) / (1 - in.margin) * 0.8);
  const double f = loom::auto_checkpoint_fraction(in);
  REQUIRE(f > 0);
  REQUIRE(f < 1);
  PlanInputs at = in;
  at.model.checkpoint = f;
  CHECK(loom::plan_memory(at).fits);
  const int64_t k = at.model.checkpointed_layers();
  CHECK(static_cast<double>(k) == f * 8);
  at.model.checkpoint = static_cast<double>(k - 1) / 8;
  CHECK_FALSE(loom::plan_memory(at).fits);
}

TEST_CASE("memory plan: a run that does not fit names its largest term and what would fit", "[plan]") {
  // Activations first: the masked path's probabilities over long rows.
  PlanInputs in = small(torch::kFloat32);
  in.model.num_layers = 8;
  in.seq_len = 1024;
  in.micro_bsz = 4;
  in.attention = loom::AttentionKernel::kMasked;
  const MemoryPlan roomy = loom::plan_memory(in);
  REQUIRE(roomy.fits);
  CHECK(roomy.suggestions.empty());
  in.device_bytes = roomy.total / 2;
  const MemoryPlan p = loom::plan_memory(in);
  CHECK_FALSE(p.fits);
  CHECK(p.largest_term() == "activations");
  CHECK(p.largest_term_bytes() == p.activations);
  REQUIRE(p.suggestions.size() >= 2);
  CHECK_THAT(p.suggestions[0], Catch::StartsWith("model.checkpoint="));
  CHECK_THAT(p.suggestions[1], Catch::StartsWith("data.micro_bsz="));
  CHECK_THAT(p.refusal("cpu"), Catch::Contains("the largest term is activations") &&
                                   Catch::Contains("Would fit: model.checkpoint="));
  const std::string json = p.to_json();
  CHECK_THAT(json, Catch::StartsWith("{\"fits\": false, \"world_size\": 1, \"device_bytes\": " +
                                     std::to_string(in.device_bytes) + ","));
  CHECK_THAT(json, Catch::Contains("\"per_rank_bytes\": {\"parameters\": " + std::to_string(p.parameters) + ",") &&
                       Catch::Contains("\"total\": " + std::to_string(p.total) + "}") &&
                       Catch::Contains("\"suggestions\": [\"model.checkpoint="));

  // The 7B shape in bf16 on 80 GB devices at W=8, replicated: the optimizer state leads, and
  // sharding it over the 8 ranks (stage 1) fits.
  PlanInputs big = small(torch::kBFloat16);
  big.cuda = true;
  big.attention = loom::AttentionKernel::kFlashVarlen;
  big.world_size = 8;
  internlm_7b_shape(big.model);
  big.seq_len = 4096;
  big.micro_bsz = 1;
  big.device_bytes = uint64_t{80} << 30;
  const MemoryPlan b = loom::plan_memory(big);
  CHECK_FALSE(b.fits);
  CHECK(b.largest_term() == "optimizer_state");
  bool stage1 = false;
  for (const auto& s : b.suggestions) stage1 = stage1 || s.rfind("parallel.zero1=-1 parallel.zero_stage=1 (", 0) == 0;
  CHECK(stage1);
  // On 2 GiB nothing fits: even at stage 3 the gathered embedding, head and layers need more.
  PlanInputs tiny = big;
  tiny.device_bytes = uint64_t{2} << 30;
  const MemoryPlan t = loom::plan_memory(tiny);
  REQUIRE(t.suggestions.size() == 1);
  CHECK_THAT(t.suggestions[0], Catch::StartsWith("none of model.checkpoint"));
  big.device_bytes = uint64_t{141} << 30;  // an H200
  CHECK(loom::plan_memory(big).fits);
}

TEST_CASE("memory plan: the table for people groups the digits of large counts", "[plan]") {
  // InternLM-7B in fp32 on one rank: 7,321,948,160 parameters (docs/TRAIN.md), 32,768-token rows;
  // every term a GiB figure with two decimals, the total past a thousand GiB.
  PlanInputs in = small(torch::kFloat32);
  internlm_7b_shape(in.model);
  in.seq_len = 32768;
  in.micro_bsz = 1;
  in.attention = loom::AttentionKernel::kCpuSegments;
  in.device_bytes = uint64_t{2048} << 30;
  const MemoryPlan p = loom::plan_memory(in);
  REQUIRE(p.num_parameters == 7321948160);
  const std::string text = p.to_text();
  INFO(text);
  CHECK_THAT(text, Catch::StartsWith("memory plan per rank (7,321,948,160 parameters, float32, 1 x 32,768 tokens "
                                     "per micro-batch, 0 of 32 layers recomputed, world size 1, "));
  // parameters: 4 bytes each = 27.2758... GiB; the optimizer's two moments twice that.
  CHECK_THAT(text, Catch::Contains("\n  parameters            27.28 GiB ") &&
                       Catch::Contains("\n  optimizer_state       54.55 GiB "));
  REQUIRE(p.total > uint64_t{1000} << 30);
  char total[64];
  std::snprintf(total, sizeof total, "%.2f", static_cast<double>(p.total) / double(uint64_t{1} << 30));
  std::string grouped = total;
  grouped.insert(grouped.find('.') - 3, ",");
  CHECK_THAT(text, Catch::Contains("\n  total " + std::string(21 - grouped.size(), ' ') + grouped + " GiB  100.0%"));
  CHECK_THAT(text, Catch::Contains("\n  device 2,048.0 GiB, 5% kept free: does not fit"));
}

TEST_CASE("memory plan: a size above its limit is refused before any arithmetic, naming the key and the limit",
          "[plan]") {
  const int64_t max = INT64_MAX, two62 = int64_t{1} << 62;
  const std::vector<std::pair<std::function<void(PlanInputs&)>, std::string>> cases = {
      {[&](PlanInputs& in) { in.model.num_layers = max; }, "model.num_layers must be in [1, 65536]"},
      {[&](PlanInputs& in) { in.model.num_layers = 4294967295; }, "model.num_layers must be in [1, 65536]"},
      {[&](PlanInputs& in) { in.model.vocab_size = max; }, "model.vocab_size must be in [1, 2147483647]"},
      {[&](PlanInputs& in) { in.model.vocab_size = two62; }, "model.vocab_size must be in [1, 2147483647]"},
      {[&](PlanInputs& in) { in.model.hidden_size = two62; }, "model.hidden_size must be in [1, 1048576]"},
      {[&](PlanInputs& in) { in.model.mlp_ratio = 1e300; }, "model.mlp_ratio must be in (0, 64]"},
      {[&](PlanInputs& in) { in.seq_len = max; }, "data.seq_len must be in [1, 16777216]"},
      {[&](PlanInputs& in) { in.micro_bsz = max; }, "data.micro_bsz must be in [1, 1048576]"},
      {[&](PlanInputs& in) { in.micro_num = max; }, "data.micro_num must be in [1, 1048576]"},
      {[&](PlanInputs& in) { in.micro_bsz = 0; }, "data.micro_bsz must be in [1, 1048576], got 0"},
      {[&](PlanInputs& in) { in.seq_len = -1; }, "data.seq_len must be in [1, 16777216], got -1"},
      {[&](PlanInputs& in) { in.world_size = max; }, "the world size must be in [1, 1048576]"},
  };
  for (const auto& [set, want] : cases) {
    INFO(want);
    PlanInputs in = small(torch::kFloat32);
    set(in);
    CHECK_THROWS_WITH(loom::plan_memory(in), Catch::Contains(want));
    CHECK_THROWS_WITH(loom::auto_checkpoint_fraction(in), Catch::Contains(want));
  }
}

namespace {

__extension__ typedef unsigned __int128 U128;  // GCC's, which -Wpedantic would refuse by name

// The count in 128 bits, from model.h's layout (an independent reference for count_parameters).
U128 parameters_128(const loom::ModelOptions& m) {
  const U128 C = m.hidden_size, V = m.vocab_size, N = m.num_layers, H = m.num_attention_heads,
                          K = m.kv_heads(), D = C / H, F = 256 * ((C * 64 + 255) / 256);  // mlp_ratio 64
  const U128 qkv = (H + 2 * K) * D;
  const U128 layer = 2 * C + qkv * C + qkv + C * H * D + C + 3 * C * F;  // biases on
  return V * C + N * layer + C + V * C;
}

}  // namespace

TEST_CASE("memory plan: sizes within their limits whose products pass 64 bits are refused naming the keys", "[plan]") {
  // The parameter count: every size at its limit is past 2^63 - 1, one layer fewer in 2^10 is not.
  loom::ModelOptions m;
  m.hidden_size = loom::kMaxHiddenSize;
  m.num_layers = loom::kMaxNumLayers;
  m.mlp_ratio = 64;
  REQUIRE(parameters_128(m) > static_cast<U128>(INT64_MAX));
  CHECK_THROWS_AS(loom::count_parameters(m), loom::SizeOverflow);
  CHECK_THROWS_WITH(m.validate(), Catch::Contains("the parameter count of model.hidden_size=1048576 "
                                                  "model.num_layers=65536 model.mlp_ratio=64"));
  m.num_layers = 1024;
  REQUIRE(parameters_128(m) < static_cast<U128>(INT64_MAX));
  CHECK(static_cast<U128>(loom::count_parameters(m)) == parameters_128(m));

  // The masked path's probabilities, B H T T b = 2^20 8 2^48 4 bytes per layer: a usage error
  // naming the keys, not a wrapped figure (or a division by one, as the loss's chunk once was).
  PlanInputs in = small(torch::kFloat32);
  in.attention = loom::AttentionKernel::kMasked;
  in.micro_bsz = loom::kMaxMicroBsz;
  in.seq_len = loom::kMaxSeqLen;
  CHECK_THROWS_AS(loom::plan_memory(in), loom::UsageError);
  CHECK_THROWS_WITH(loom::plan_memory(in), Catch::Contains("data.seq_len=16777216 data.micro_bsz=1048576") &&
                                               Catch::Contains("needs more bytes than 64 bits count"));

  // At the largest vocabulary and layer count the plan is planned, in one pass over the layers.
  PlanInputs deep = small(torch::kFloat32);
  deep.model.num_layers = loom::kMaxNumLayers;
  deep.model.vocab_size = loom::kMaxVocabSize;
  deep.device_bytes = uint64_t{1} << 30;
  const MemoryPlan p = loom::plan_memory(deep);
  CHECK_FALSE(p.fits);
  CHECK(p.num_parameters == loom::count_parameters(deep.model));
  CHECK(p.parameters == static_cast<uint64_t>(p.num_parameters) * 4);
}

TEST_CASE("size arithmetic: + and * throw where 64 bits would wrap", "[plan]") {
  const loom::Size two32 = uint64_t{1} << 32;
  CHECK((two32 * (uint64_t{1} << 31)).value() == uint64_t{1} << 63);
  CHECK_THROWS_AS(two32 * two32, loom::SizeOverflow);
  CHECK_THROWS_WITH(two32 * two32, "4294967296 x 4294967296 exceeds 2^64 - 1");
  CHECK((loom::Size(UINT64_MAX - 1) + 1).value() == UINT64_MAX);
  CHECK_THROWS_AS(loom::Size(UINT64_MAX) + 1, loom::SizeOverflow);
  CHECK((loom::Size(7) - 7).value() == 0);
  CHECK((loom::Size(7) / 2).value() == 3);
}
