// The model's initialisation (trainer/model/init.h): the counter-based generator against a host
// reference of its formula, determinism (same seed -> same weights, whatever the default
// generator, the dtype only rounds), InternLM's init statistics against their exact sampling
// distributions, and the CPU constructor's stream, bitwise the one torch::nn modules gave.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "init.h"
#include "model.h"

namespace {

using loom::InternLM;
using loom::ModelInit;
using loom::ModelOptions;

ModelOptions small_options() {
  ModelOptions o;
  o.hidden_size = 128;
  o.num_layers = 3;
  o.num_attention_heads = 4;
  o.num_kv_attention_heads = 2;
  o.vocab_size = 1000;
  o.init_std = 0.02;
  return o;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// init.h's formula on the host, in uint64 and libm's float64.
double reference_normal(uint64_t key, int64_t e) {
  const auto u = [key](uint64_t c) {
    const uint64_t bits = loom::splitmix64(key + c * 0x9e3779b97f4a7c15ULL);
    return (static_cast<double>(bits >> 11) + 0.5) * std::ldexp(1.0, -53);
  };
  const uint64_t p = static_cast<uint64_t>(e) / 2;
  const double r = std::sqrt(-2.0 * std::log(u(2 * p))), t = 2.0 * M_PI * u(2 * p + 1);
  return e % 2 == 0 ? r * std::cos(t) : r * std::sin(t);
}

void require_same_weights(InternLM& a, InternLM& b) {
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].key());
    REQUIRE(pa[i].key() == pb[i].key());
    CHECK(pa[i].value().scalar_type() == pb[i].value().scalar_type());
    CHECK(torch::equal(pa[i].value(), pb[i].value()));
  }
}

}  // namespace

TEST_CASE("splitmix64 is SplitMix64's output function", "[init]") {
  // SplitMix64 seeded with 0: its first outputs are splitmix64(k * gamma), k = 1, 2 (the values
  // of the reference implementation, Vigna's splitmix64.c).
  CHECK(loom::splitmix64(0x9e3779b97f4a7c15ULL) == 0xe220a8397b1dcdafULL);
  CHECK(loom::splitmix64(2 * 0x9e3779b97f4a7c15ULL) == 0x6e789e6aa1b965f4ULL);
  CHECK(loom::init_key(5, 3) == loom::splitmix64(5 ^ loom::splitmix64(3)));
}

TEST_CASE("counter_normal follows its formula, and element e depends on e alone", "[init]") {
  const uint64_t key = loom::init_key(1234, 7);
  const int64_t n = 1001;  // odd: the last pair's second value is dropped
  const torch::Tensor z = loom::counter_normal(key, 0, n, torch::kCPU);
  REQUIRE(z.scalar_type() == torch::kFloat64);
  REQUIRE(z.numel() == n);
  const auto* zp = z.data_ptr<double>();
  double worst = 0;
  for (int64_t e = 0; e < n; ++e) worst = std::max(worst, std::abs(zp[e] - reference_normal(key, e)));
  // LibTorch's vectorised log/cos/sin (SLEEF, 1 ulp) against libm: a few ulp of values below ~6.
  CHECK(worst < 1e-13);
  // A chunk starting at element 400 holds the same values as elements 400.. of the whole.
  const torch::Tensor tail = loom::counter_normal(key, 400, n - 400, torch::kCPU);
  CHECK((tail - z.narrow(0, 400, n - 400)).abs().max().item<double>() < 1e-13);
  // Another key: other values.
  CHECK(!torch::allclose(loom::counter_normal(loom::init_key(1234, 8), 0, n, torch::kCPU), z));
}

TEST_CASE("a seeded model is the same every time, whatever the default generator", "[init]") {
  const ModelOptions o = small_options();
  torch::manual_seed(1);
  InternLM a(o, ModelInit{torch::kCPU, 42});
  torch::manual_seed(2);
  InternLM b(o, ModelInit{torch::kCPU, 42});
  require_same_weights(a, b);
  InternLM c(o, ModelInit{torch::kCPU, 43});
  CHECK(!torch::equal(a->tok_embeddings->weight, c->tok_embeddings->weight));
  CHECK(!torch::equal(a->output->weight, c->output->weight));

  // Each parameter is its formula: parameter i (named_parameters() order) from init_key(seed, i).
  const auto params = a->named_parameters();
  bool checked_scaled = false;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].key();
    if (name != "layers.2.feed_forward.w3.weight") continue;
    const torch::Tensor& w = params[i].value();
    const double std = o.init_std / std::sqrt(2.0 * static_cast<double>(o.num_layers));
    const torch::Tensor expect =
        loom::counter_normal(loom::init_key(42, i), 0, w.numel(), torch::kCPU).mul_(std).to(torch::kFloat32);
    CHECK(torch::equal(w.flatten(), expect));
    checked_scaled = true;
  }
  CHECK(checked_scaled);
}

TEST_CASE("a bfloat16 seeded model is the float32 one rounded", "[init]") {
  ModelOptions o = small_options();
  InternLM f32(o, ModelInit{torch::kCPU, 9});
  o.dtype = torch::kBFloat16;
  InternLM bf16(o, ModelInit{torch::kCPU, 9});
  const auto pf = f32->named_parameters(), pb = bf16->named_parameters();
  REQUIRE(pf.size() == pb.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    INFO(pf[i].key());
    // The final norm stays fp32, everything else takes model.dtype (layer norms included).
    CHECK(pb[i].value().scalar_type() == (pf[i].key() == "norm.weight" ? torch::kFloat32 : torch::kBFloat16));
    CHECK(torch::equal(pb[i].value(), pf[i].value().to(pb[i].value().scalar_type())));
  }
}

TEST_CASE("InternLM's init statistics: normal(0, std) weights, scaled wo and w3, norms 1, biases 0", "[init]") {
  for (const bool scaled_init : {true, false}) {
    ModelOptions o = small_options();
    o.scaled_init = scaled_init;
    InternLM m(o, ModelInit{torch::kCPU, 7});
    const double scaled_std = scaled_init ? o.init_std / std::sqrt(2.0 * static_cast<double>(o.num_layers)) : o.init_std;
    int weights = 0, scaled = 0, norms = 0, biases = 0;
    for (const auto& item : m->named_parameters()) {
      const std::string& name = item.key();
      const torch::Tensor p = item.value().detach().to(torch::kFloat64).flatten();
      INFO(name << " (scaled_init " << scaled_init << ")");
      if (ends_with(name, ".bias")) {
        CHECK(torch::equal(p, torch::zeros_like(p)));
        ++biases;
      } else if (ends_with(name, "norm.weight")) {
        CHECK(torch::equal(p, torch::ones_like(p)));
        ++norms;
      } else {
        const bool is_scaled = ends_with(name, "attention.wo.weight") || ends_with(name, "feed_forward.w3.weight");
        const double sigma = is_scaled ? scaled_std : o.init_std;
        scaled += is_scaled;
        ++weights;
        // Sample mean ~ N(0, sigma^2 / n), sample std ~ sigma (1 + N(0, 1 / 2n)), the share of
        // |w| > 2 sigma ~ 0.0455 +- sqrt(0.0455 * 0.9545 / n): each within 5 of its standard errors.
        const double n = static_cast<double>(p.numel());
        const double mean = p.mean().item<double>(), sd = p.std().item<double>();
        const double tail = (p.abs() > 2 * sigma).to(torch::kFloat64).mean().item<double>();
        const double tail_p = std::erfc(2 / std::sqrt(2.0));
        CHECK(std::abs(mean) < 5 * sigma / std::sqrt(n));
        CHECK(std::abs(sd / sigma - 1) < 5 / std::sqrt(2 * n));
        CHECK(std::abs(tail - tail_p) < 5 * std::sqrt(tail_p * (1 - tail_p) / n));
      }
    }
    // tok_embeddings, output, and per layer wqkv, wo, w1, w2, w3; wo and w3 scaled.
    CHECK(weights == 2 + 5 * o.num_layers);
    CHECK(scaled == 2 * o.num_layers);
    CHECK(norms == 2 * o.num_layers + 1);
    CHECK(biases == 2 * o.num_layers);  // wqkv and wo (qkv_bias, out_bias)
  }
}

TEST_CASE("InternLM(o) keeps the default generator's stream of the torch::nn-built model", "[init]") {
  // The model as it was built before ModelInit: torch::nn modules (their construction draws),
  // then InternLM's init from the same generator in named_parameters() order.
  ModelOptions o = small_options();
  o.num_layers = 2;
  o.tie_embeddings = false;
  const int64_t C = o.hidden_size, D = o.head_dim(), F = o.ffn_hidden();
  const int64_t qkv = (o.num_attention_heads + 2 * o.kv_heads()) * D;
  torch::manual_seed(77);
  torch::nn::Embedding emb(o.vocab_size, C);
  std::vector<torch::nn::Linear> lin;  // per layer: wqkv, wo, w1, w2, w3
  for (int64_t l = 0; l < o.num_layers; ++l) {
    lin.emplace_back(torch::nn::LinearOptions(C, qkv).bias(o.qkv_bias));
    lin.emplace_back(torch::nn::LinearOptions(o.num_attention_heads * D, C).bias(o.out_bias));
    lin.emplace_back(torch::nn::LinearOptions(C, F).bias(false));
    lin.emplace_back(torch::nn::LinearOptions(C, F).bias(false));
    lin.emplace_back(torch::nn::LinearOptions(F, C).bias(false));
  }
  torch::nn::Linear head(torch::nn::LinearOptions(C, o.vocab_size).bias(false));
  const double scaled_std = o.init_std / std::sqrt(2.0 * static_cast<double>(o.num_layers));
  {
    torch::NoGradGuard no_grad;
    emb->weight.normal_(0.0, o.init_std);
    for (size_t i = 0; i < lin.size(); ++i) {
      const bool is_scaled = i % 5 == 1 || i % 5 == 4;  // wo, w3
      lin[i]->weight.normal_(0.0, is_scaled ? scaled_std : o.init_std);
    }
    head->weight.normal_(0.0, o.init_std);
  }
  const torch::Tensor next = torch::randn({4});  // where the generator stands after the build
  torch::manual_seed(77);
  InternLM m(o);
  CHECK(torch::equal(m->tok_embeddings->weight, emb->weight));
  CHECK(torch::equal(m->output->weight, head->weight));
  for (int64_t l = 0; l < o.num_layers; ++l) {
    auto* layer = m->layers[l]->as<loom::DecoderLayerImpl>();
    REQUIRE(layer != nullptr);
    const size_t b = static_cast<size_t>(5 * l);
    CHECK(torch::equal(layer->attention->wqkv->weight, lin[b]->weight));
    CHECK(torch::equal(layer->attention->wo->weight, lin[b + 1]->weight));
    CHECK(torch::equal(layer->feed_forward->w1->weight, lin[b + 2]->weight));
    CHECK(torch::equal(layer->feed_forward->w2->weight, lin[b + 3]->weight));
    CHECK(torch::equal(layer->feed_forward->w3->weight, lin[b + 4]->weight));
  }
  CHECK(torch::equal(torch::randn({4}), next));
}
