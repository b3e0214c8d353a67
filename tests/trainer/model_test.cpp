// The InternLM model, packed attention, loss, activation checkpointing and FLOPs, against an
// independent float64 python3-torch reference (tests/trainer/model_reference.py) and exact
// properties (pack == documents alone, checkpointed == plain bitwise, GQA == MHA with repeated kv).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "activation_checkpoint.h"
#include "attention.h"
#include "attention_select.h"
#include "batch.h"
#include "cpu_attention.h"
#include "device_peak.h"
#include "flops.h"
#include "fused_ops.h"
#include "loom/error.h"
#include "loss.h"
#include "model.h"
#include "test_util.h"

namespace {

using loom::Batch;
using loom::InternLM;
using loom::ModelOptions;
using loom::test::TempDir;
using Docs = std::vector<std::vector<int64_t>>;  // the documents of one row

// The tiny model of the parity tests: 2 layers, C 64, H 4, K 2, V 97 (F = 256).
ModelOptions tiny_options() {
  ModelOptions o;
  o.hidden_size = 64;
  o.num_layers = 2;
  o.num_attention_heads = 4;
  o.num_kv_attention_heads = 2;
  o.vocab_size = 97;
  o.init_std = 0.2;  // larger than InternLM's 0.02, so attention is far from uniform and the test bites
  return o;
}

std::vector<int64_t> random_doc(int64_t n, int64_t vocab) {
  const torch::Tensor t = torch::randint(0, vocab, {n}, torch::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

// A micro-batch as the loader builds it (trainer/core/batch.h): documents packed left to right, padding
// (token 0, segment -1) at the end of each row; each padding run is one cu_seqlens segment.
Batch make_batch(const std::vector<Docs>& rows, int64_t T, std::vector<int64_t> dataset_ids = {}) {
  const int64_t B = static_cast<int64_t>(rows.size());
  Batch b;
  b.tokens = torch::zeros({B, T}, torch::kLong);
  b.labels = torch::full({B, T}, loom::kIgnoreIndex, torch::kLong);
  b.positions = torch::zeros({B, T}, torch::kLong);
  b.segments = torch::full({B, T}, -1, torch::kInt);
  std::vector<int32_t> cu{0};
  for (int64_t r = 0; r < B; ++r) {
    int64_t t = 0;
    int32_t seg = 0;
    for (const auto& doc : rows[r]) {
      const int64_t n = static_cast<int64_t>(doc.size());
      REQUIRE(t + n <= T);
      for (int64_t i = 0; i < n; ++i) {
        b.tokens[r][t + i] = doc[i];
        b.positions[r][t + i] = i;
        b.segments[r][t + i] = seg;
        if (i + 1 < n) b.labels[r][t + i] = doc[i + 1];
      }
      t += n;
      ++seg;
      cu.push_back(static_cast<int32_t>(r * T + t));
      b.max_seqlen = std::max(b.max_seqlen, n);
    }
    if (t < T) {
      cu.push_back(static_cast<int32_t>((r + 1) * T));
      b.max_seqlen = std::max(b.max_seqlen, T - t);
    }
  }
  b.cu_seqlens = torch::tensor(cu, torch::kInt);
  b.num_loss_tokens = (b.labels != loom::kIgnoreIndex).sum().item<int64_t>();
  if (dataset_ids.empty()) dataset_ids.assign(B, 0);
  b.dataset_ids = torch::tensor(dataset_ids, torch::kLong);
  return b;
}

// ---- .npy exchange with the Python reference (format 1.0, little endian, C order) ----

void write_npy(const std::string& path, const torch::Tensor& t) {
  const torch::Tensor c = t.detach().cpu().contiguous();
  std::string descr;
  switch (c.scalar_type()) {
    case torch::kFloat32: descr = "<f4"; break;
    case torch::kFloat64: descr = "<f8"; break;
    case torch::kInt64: descr = "<i8"; break;
    case torch::kInt32: descr = "<i4"; break;
    default: FAIL("write_npy: unsupported dtype");
  }
  std::string shape = "(";
  for (int64_t d : c.sizes()) shape += std::to_string(d) + ",";
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  loom::test::write_all(path, out);
}

// Reads a float64 .npy written by numpy (header format 1.0) and checks its shape.
torch::Tensor read_npy_f64(const std::string& path, const std::vector<int64_t>& shape) {
  const std::string data = loom::test::read_all(path);
  REQUIRE(data.size() > 10);
  REQUIRE(data.compare(0, 6, "\x93NUMPY") == 0);
  const size_t header_len = static_cast<uint8_t>(data[8]) | (static_cast<size_t>(static_cast<uint8_t>(data[9])) << 8);
  const std::string header = data.substr(10, header_len);
  REQUIRE(header.find("'descr': '<f8'") != std::string::npos);
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  REQUIRE(data.size() == 10 + header_len + static_cast<size_t>(numel) * 8);
  torch::Tensor t = torch::empty(shape, torch::kFloat64);
  std::memcpy(t.data_ptr(), data.data() + 10 + header_len, numel * 8);
  return t;
}

std::string json_bool(bool b) { return b ? "true" : "false"; }

void run_reference(const std::string& mode, const std::string& dir) {
  const std::string script = loom::test::source_dir() + "/tests/trainer/model_reference.py";
  const auto r = loom::test::run(loom::test::python() + " " + loom::test::quote(script) + " " + mode + " " +
                                 loom::test::quote(dir));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}

// max |a - b| relative to max |b| (float32 arithmetic against a float64 reference).
double rel_error(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.detach().to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  const double scale = std::max(b64.abs().max().item<double>(), 1e-30);
  return (a64 - b64).abs().max().item<double>() / scale;
}

}  // namespace

TEST_CASE("model logits loss and gradients equal a float64 torch reference", "[model]") {
  // Both CPU attention kernels: the masked math path and segment attention (what loom-train runs).
  const bool segments = GENERATE(false, true);
  INFO((segments ? "segment attention" : "masked attention"));
  torch::manual_seed(1234);
  ModelOptions o = tiny_options();
  InternLM model(o);
  if (segments)
    model->set_attention(loom::make_attention_kernel(loom::AttentionKernel::kCpuSegments, torch::kCPU, o.dtype,
                                                     o.head_dim()));
  // Row 0: two documents (9 + 7 tokens). Row 1: one document of 12 tokens and 4 padding.
  const Batch b = make_batch({{random_doc(9, 97), random_doc(7, 97)}, {random_doc(12, 97)}}, 16);
  const double smoothing = 0.1;

  const torch::Tensor logits = model->forward(b);
  REQUIRE(logits.sizes() == torch::IntArrayRef({2, 16, 97}));
  REQUIRE(logits.scalar_type() == torch::kFloat32);
  const loom::LossResult loss = loom::compute_loss(logits, b, smoothing);
  loss.loss_sum.backward();

  TempDir dir("model_parity");
  std::string names;
  for (const auto& p : model->named_parameters()) {
    write_npy(dir / (p.key() + ".npy"), p.value());
    names += (names.empty() ? "\"" : ", \"") + p.key() + "\"";
  }
  write_npy(dir / "tokens.npy", b.tokens);
  write_npy(dir / "labels.npy", b.labels);
  write_npy(dir / "positions.npy", b.positions);
  write_npy(dir / "segments.npy", b.segments);
  loom::test::write_all(
      dir / "config.json",
      loom::str("{\"hidden_size\": ", o.hidden_size, ", \"num_layers\": ", o.num_layers,
                ", \"num_attention_heads\": ", o.num_attention_heads, ", \"num_kv_attention_heads\": ",
                o.num_kv_attention_heads, ", \"norm_eps\": ", o.norm_eps, ", \"rope_base\": ", o.rope_base,
                ", \"qkv_bias\": ", json_bool(o.qkv_bias), ", \"out_bias\": ", json_bool(o.out_bias),
                ", \"tie_embeddings\": ", json_bool(o.tie_embeddings), ", \"label_smoothing\": ", smoothing,
                ", \"parameters\": [", names, "]}"));
  run_reference("model", dir.path());

  // float32 against float64: fp32's eps is 1.2e-7; ~1e-6 is observed after two layers, so 1e-5
  // leaves a 10x margin while any real mistake (a wrong mask, rotary or init) gives > 1e-2.
  const double tol = 1e-5;
  // Padding positions carry no loss; segment attention lets a padding run attend causally within
  // itself where the reference lets each padding token see only itself, so compare real tokens.
  const torch::Tensor real = (b.segments >= 0).unsqueeze(-1);
  CHECK(rel_error(logits * real, read_npy_f64(dir / "ref_logits.npy", {2, 16, 97}) * real) < tol);
  const torch::Tensor ref = read_npy_f64(dir / "ref_loss.npy", {3});
  CHECK(loss.loss_sum.item<double>() == Approx(ref[0].item<double>()).epsilon(1e-6));
  CHECK(loss.tokens.item<int64_t>() == static_cast<int64_t>(ref[1].item<double>()));
  CHECK(loss.tokens.item<int64_t>() == 8 + 6 + 11);
  CHECK(loss.correct.item<int64_t>() == static_cast<int64_t>(ref[2].item<double>()));
  int checked = 0;
  for (const auto& p : model->named_parameters()) {
    INFO(p.key());
    const torch::Tensor g = read_npy_f64(dir / ("ref_grad." + p.key() + ".npy"), p.value().sizes().vec());
    REQUIRE(p.value().grad().defined());
    CHECK(g.abs().max().item<double>() > 0);  // every parameter takes part
    CHECK(rel_error(p.value().grad(), g) < tol);
    ++checked;
  }
  CHECK(checked == 2 + 2 * 9 + 1);  // embeddings, head, 9 tensors per layer, final norm
}

TEST_CASE("a pack of two documents gives the logits and loss of each document alone", "[model]") {
  torch::manual_seed(99);
  InternLM model(tiny_options());
  model->eval();
  const auto a = random_doc(9, 97), c = random_doc(7, 97), d = random_doc(11, 97);
  const Batch packed = make_batch({{a, c}, {d}}, 16);
  const torch::Tensor lp = model->forward(packed);
  const torch::Tensor la = model->forward(make_batch({{a}}, 9));
  const torch::Tensor lc = model->forward(make_batch({{c}}, 7));
  const torch::Tensor ld = model->forward(make_batch({{d}}, 11));
  // Different matmul shapes may round differently: float32 tolerance, not bitwise.
  CHECK(rel_error(lp[0].slice(0, 0, 9), la[0].to(torch::kFloat64)) < 1e-5);
  CHECK(rel_error(lp[0].slice(0, 9, 16), lc[0].to(torch::kFloat64)) < 1e-5);
  CHECK(rel_error(lp[1].slice(0, 0, 11), ld[0].to(torch::kFloat64)) < 1e-5);
  // Without the mask the second document would see the first: prove the comparison can fail.
  const torch::Tensor no_reset = model->forward(make_batch({[&] {
                                                             auto ac = a;
                                                             ac.insert(ac.end(), c.begin(), c.end());
                                                             return Docs{ac};
                                                           }()},
                                                           16));
  CHECK(rel_error(no_reset[0].slice(0, 9, 16), lc[0].to(torch::kFloat64)) > 1e-2);

  const double eps = 0.1;
  const auto lpk = loom::compute_loss(lp, packed, eps);
  const double alone = loom::compute_loss(la, make_batch({{a}}, 9), eps).loss_sum.item<double>() +
                       loom::compute_loss(lc, make_batch({{c}}, 7), eps).loss_sum.item<double>() +
                       loom::compute_loss(ld, make_batch({{d}}, 11), eps).loss_sum.item<double>();
  CHECK(lpk.loss_sum.item<double>() == Approx(alone).epsilon(1e-5));
  CHECK(lpk.tokens.item<int64_t>() == 8 + 6 + 10);
}

TEST_CASE("GQA equals MHA with repeated kv weights", "[model]") {
  torch::manual_seed(5);
  ModelOptions og = tiny_options();  // H 4, K 2
  ModelOptions om = og;
  om.num_kv_attention_heads = 4;
  InternLM gqa(og), mha(om);
  const int64_t H = 4, K = 2, D = 16, G = H / K;
  {
    torch::NoGradGuard no_grad;
    auto src = gqa->named_parameters();
    for (auto& p : mha->named_parameters()) {
      const torch::Tensor s = src[p.key()];
      if (p.key().find("wqkv") == std::string::npos) {
        p.value().copy_(s);
        continue;
      }
      // rows: q (H*D) | k (K*D) | v (K*D); MHA kv head h = GQA kv head h / G.
      std::vector<torch::Tensor> parts{s.narrow(0, 0, H * D)};
      for (int64_t block = 0; block < 2; ++block) {
        for (int64_t h = 0; h < H; ++h) parts.push_back(s.narrow(0, (H + block * K + h / G) * D, D));
      }
      p.value().copy_(torch::cat(parts, 0));
    }
  }
  const Batch b = make_batch({{random_doc(10, 97), random_doc(6, 97)}, {random_doc(16, 97)}}, 16);
  const torch::Tensor lg = gqa->forward(b), lm = mha->forward(b);
  CHECK(rel_error(lg, lm.to(torch::kFloat64)) < 1e-6);
  CHECK(gqa->num_parameters() < mha->num_parameters());
}

TEST_CASE("checkpointed layers give bitwise the gradients of the plain model with dropout", "[model]") {
  for (double fraction : {1.0, 0.5}) {
    INFO("model.checkpoint = " << fraction);
    ModelOptions o = tiny_options();
    o.dropout = 0.1;
    ModelOptions oc = o;
    oc.checkpoint = fraction;
    torch::manual_seed(7);
    InternLM plain(o);
    torch::manual_seed(7);
    InternLM ckpt(oc);
    const Batch b = make_batch({{random_doc(9, 97), random_doc(7, 97)}, {random_doc(12, 97)}}, 16);

    const auto step = [&](InternLM& m) {
      m->train();
      torch::manual_seed(42);
      const torch::Tensor logits = m->forward(b);
      const auto loss = loom::compute_loss(logits, b, 0.1);
      loss.loss_sum.backward();
      // The generator must end where the plain run leaves it.
      return std::make_pair(loss.loss_sum.detach(), torch::rand({8}));
    };
    const auto rp = step(plain);
    const auto rc = step(ckpt);
    CHECK(torch::equal(rp.first, rc.first));
    CHECK(torch::equal(rp.second, rc.second));
    auto cp = ckpt->named_parameters();
    for (const auto& p : plain->named_parameters()) {
      INFO(p.key());
      REQUIRE(cp[p.key()].grad().defined());
      CHECK(torch::equal(p.value().grad(), cp[p.key()].grad()));
    }
    // Dropout really is on: the train forward differs from the eval one.
    torch::manual_seed(42);
    plain->train();
    const torch::Tensor train_logits = plain->forward(b);
    plain->eval();
    CHECK(rel_error(train_logits, plain->forward(b).to(torch::kFloat64)) > 1e-3);
  }
}

TEST_CASE("checkpoint recomputes in backward under the forward's random state", "[model]") {
  int calls = 0;
  const torch::Tensor w = torch::randn({8, 8}, torch::requires_grad());
  const loom::CheckpointedFn fn = [&](const torch::Tensor& x) {
    ++calls;
    return torch::dropout(torch::matmul(x, w).tanh(), 0.5, /*train=*/true);
  };
  const torch::Tensor x0 = torch::randn({4, 8});

  torch::manual_seed(3);
  const torch::Tensor xa = x0.clone().requires_grad_(true);
  fn(xa).pow(2).sum().backward();
  const torch::Tensor ga = xa.grad().clone(), gwa = w.grad().clone();
  w.mutable_grad().zero_();

  calls = 0;
  torch::manual_seed(3);
  const torch::Tensor xb = x0.clone().requires_grad_(true);
  const torch::Tensor out = loom::checkpoint(fn, xb);
  CHECK(calls == 1);
  CHECK_FALSE(out.grad_fn() == nullptr);
  out.pow(2).sum().backward();
  CHECK(calls == 2);  // recomputed once in backward
  CHECK(torch::equal(xb.grad(), ga));
  CHECK(torch::equal(w.grad(), gwa));

  // Without grad it is a plain call.
  torch::NoGradGuard no_grad;
  calls = 0;
  loom::checkpoint(fn, xb);
  CHECK(calls == 1);
}

TEST_CASE("loss with label smoothing equals torch cross_entropy", "[model][loss]") {
  torch::manual_seed(11);
  const int64_t B = 3, T = 16, V = 97;
  const torch::Tensor logits = torch::randn({B, T, V}) * 3;
  Batch b;
  b.labels = torch::randint(0, V, {B, T}, torch::kLong);
  b.labels.index_put_({torch::rand({B, T}) < 0.25}, loom::kIgnoreIndex);
  b.labels[2][3] = torch::argmax(logits[2][3]);  // at least one hit
  b.dataset_ids = torch::tensor(std::vector<int64_t>{1, 0, 1}, torch::kLong);
  const std::vector<double> smoothing{0.0, 0.1, 0.5, 1.0};

  TempDir dir("loss_ref");
  write_npy(dir / "logits.npy", logits);
  write_npy(dir / "labels.npy", b.labels);
  loom::test::write_all(dir / "config.json", "{\"smoothing\": [0.0, 0.1, 0.5, 1.0]}");
  run_reference("loss", dir.path());

  for (size_t i = 0; i < smoothing.size(); ++i) {
    INFO("label_smoothing = " << smoothing[i]);
    const auto r = loom::compute_loss(logits, b, smoothing[i], 3);
    const torch::Tensor ref = read_npy_f64(dir / ("ref_loss_" + std::to_string(i) + ".npy"), {3});
    CHECK(r.loss_sum.item<double>() == Approx(ref[0].item<double>()).epsilon(1e-6));
    CHECK(r.tokens.item<int64_t>() == static_cast<int64_t>(ref[1].item<double>()));
    CHECK(r.correct.item<int64_t>() == static_cast<int64_t>(ref[2].item<double>()));
    CHECK(r.correct.item<int64_t>() >= 1);
    // Per dataset: rows 0 and 2 are dataset 1, row 1 is dataset 0, dataset 2 is empty.
    const auto row = [&](int64_t rr) {
      Batch one;
      one.labels = b.labels.slice(0, rr, rr + 1);
      return loom::compute_loss(logits.slice(0, rr, rr + 1), one, smoothing[i]);
    };
    const auto r0 = row(0), r1 = row(1), r2 = row(2);
    REQUIRE(r.dataset_loss_sum.sizes() == torch::IntArrayRef({3}));
    CHECK(r.dataset_loss_sum[0].item<double>() == Approx(r1.loss_sum.item<double>()).epsilon(1e-6));
    CHECK(r.dataset_loss_sum[1].item<double>() ==
          Approx(r0.loss_sum.item<double>() + r2.loss_sum.item<double>()).epsilon(1e-6));
    CHECK(r.dataset_loss_sum[2].item<double>() == 0.0);
    CHECK(r.dataset_tokens[1].item<int64_t>() == r0.tokens.item<int64_t>() + r2.tokens.item<int64_t>());
    CHECK(r.dataset_correct[0].item<int64_t>() == r1.correct.item<int64_t>());
    CHECK(r.dataset_tokens[2].item<int64_t>() == 0);
  }
}

TEST_CASE("varlen attention hook sees the flattened tokens and cu_seqlens", "[model]") {
  torch::manual_seed(21);
  InternLM model(tiny_options());
  model->eval();
  const Batch b = make_batch({{random_doc(9, 97), random_doc(7, 97)}, {random_doc(12, 97)}}, 16);
  const torch::Tensor expected = model->forward(b);
  int calls = 0;
  // A varlen kernel built from the math path, one segment at a time.
  model->set_attention([&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& cu, const torch::Tensor& cu_host, int64_t max_seqlen,
                                 double scale) {
    ++calls;
    CHECK(torch::equal(cu_host, cu));  // a CPU batch is its own host copy
    CHECK(max_seqlen == 12);
    CHECK(scale == Approx(1.0 / std::sqrt(16.0)));
    std::vector<torch::Tensor> parts;
    for (int64_t s = 0; s + 1 < cu.size(0); ++s) {
      const int64_t lo = cu[s].item<int64_t>(), n = cu[s + 1].item<int64_t>() - lo;
      const auto bopt = torch::TensorOptions().dtype(torch::kBool);
      const torch::Tensor mask = torch::ones({n, n}, bopt).tril().view({1, 1, 1, n, n});
      parts.push_back(loom::masked_attention(q.narrow(0, lo, n).unsqueeze(0), k.narrow(0, lo, n).unsqueeze(0),
                                             v.narrow(0, lo, n).unsqueeze(0), mask)[0]);
    }
    return torch::cat(parts, 0);
  });
  const torch::Tensor got = model->forward(b);
  CHECK(calls == 2);  // once per layer
  // Real tokens agree; padding rows differ by design (one causal segment vs. self only).
  CHECK(rel_error(got[0], expected[0].to(torch::kFloat64)) < 1e-5);
  CHECK(rel_error(got[1].slice(0, 0, 12), expected[1].slice(0, 0, 12).to(torch::kFloat64)) < 1e-5);
}

TEST_CASE("parameter counts and FFN sizes of the 7B and 20B shapes", "[model][flops]") {
  ModelOptions llama7b;  // LLaMA-7B: no biases, vocab 32000; Meta's published 6,738,415,616
  llama7b.hidden_size = 4096;
  llama7b.num_layers = 32;
  llama7b.num_attention_heads = 32;
  llama7b.vocab_size = 32000;
  llama7b.qkv_bias = llama7b.out_bias = false;
  CHECK(llama7b.ffn_hidden() == 11008);
  CHECK(loom::count_parameters(llama7b) == 6738415616LL);
  ModelOptions internlm7b = llama7b;  // + biased qkv and wo, vocab 103168
  internlm7b.vocab_size = 103168;
  internlm7b.qkv_bias = internlm7b.out_bias = true;
  CHECK(loom::count_parameters(internlm7b) == 6738415616LL + 2 * (103168 - 32000) * 4096LL + 32 * (3 * 4096 + 4096));
  ModelOptions internlm20b = internlm7b;
  internlm20b.hidden_size = 5120;
  internlm20b.num_layers = 60;
  internlm20b.num_attention_heads = 40;
  CHECK(internlm20b.ffn_hidden() == 13824);  // HF internlm-20b intermediate_size

  // The closed form equals the instantiated model for every variant.
  for (int variant = 0; variant < 4; ++variant) {
    ModelOptions o = tiny_options();
    o.tie_embeddings = variant == 1;
    o.qkv_bias = o.out_bias = variant != 2;
    o.num_kv_attention_heads = variant == 3 ? 0 : 2;
    INFO("variant " << variant);
    InternLM m(o);
    CHECK(m->num_parameters() == loom::count_parameters(o));
  }
}

TEST_CASE("each layer's w1 and w2 share one allocation, w2's rows after w1's", "[model]") {
  // fused_gated_projection reads [w1; w2] as one weight without a copy where this holds: in every
  // model loom-train builds (ModelInit), and in the default construction in fp32.
  for (int variant = 0; variant < 3; ++variant) {
    ModelOptions o = tiny_options();
    if (variant == 2) o.dtype = torch::kBFloat16;
    INFO("variant " << variant);
    InternLM m = variant == 0 ? InternLM(o) : InternLM(o, loom::ModelInit{torch::kCPU, 3});
    for (int64_t i = 0; i < o.num_layers; ++i) {
      const auto& ff = m->layers->ptr(static_cast<size_t>(i))->as<loom::DecoderLayerImpl>()->feed_forward;
      const torch::Tensor &w1 = ff->w1->weight, &w2 = ff->w2->weight;
      CHECK(w1.sizes() == torch::IntArrayRef({o.ffn_hidden(), o.hidden_size}));
      CHECK(w2.sizes() == w1.sizes());
      CHECK(w1.is_leaf());
      CHECK(w1.requires_grad());
      CHECK(w1.storage().unsafeGetStorageImpl() == w2.storage().unsafeGetStorageImpl());
      CHECK(w2.storage_offset() == w1.storage_offset() + w1.numel());
      CHECK(!torch::equal(w1, w2));  // initialised apart
    }
  }
  // Without loom's CUDA kernels nothing takes the fused residual or gated paths.
  const torch::Tensor x = torch::randn({1, 3, 64});
  CHECK(!loom::fused_residual_rmsnorm_applies(x, torch::ones({64})));
  CHECK(!loom::fused_gated_projection_applies(x, torch::randn({8, 64}), torch::randn({8, 64})));
}

namespace {

// C 512, 4 layers, 8 heads, F = 2048 exactly (so InternLM's mlp_ratio * 3/2 SwiGLU term is exact), V 1000.
ModelOptions flops_options() {
  ModelOptions o;
  o.hidden_size = 512;
  o.num_layers = 4;
  o.num_attention_heads = 8;
  o.mlp_ratio = 4.0;
  o.vocab_size = 1000;
  return o;
}

}  // namespace

TEST_CASE("FLOPs per token match InternLM's get_megatron_flops", "[model][flops]") {
  ModelOptions o = flops_options();
  const double C = 512, L = 4, V = 1000, S = 128, r = 4.0 * 3 / 2;
  // InternLM's formula for a batch of one sequence, divided by its S tokens.
  const auto megatron = [&](double factor) {
    return (factor * ((8 + r * 4) * S * C * C + 4 * S * S * C) * L + 6 * S * C * V) / S;
  };
  CHECK(loom::model_flops_per_token(o, 128) == Approx(megatron(3)).epsilon(1e-12));
  CHECK(loom::hardware_flops_per_token(o, 128) == Approx(megatron(3)).epsilon(1e-12));
  o.checkpoint = 1.0;
  CHECK(loom::model_flops_per_token(o, 128) == Approx(megatron(3)).epsilon(1e-12));
  CHECK(loom::hardware_flops_per_token(o, 128) == Approx(megatron(4)).epsilon(1e-12));
  // GQA: k and v shrink with K.
  o.num_kv_attention_heads = 2;
  CHECK(loom::layer_matmul_parameters(o) == 512 * (8 + 4) * 64 + 512 * 512 + 3 * 512 * 2048);
}

TEST_CASE("executed FLOPs count causal attention per document and the recomputed forwards", "[model][flops]") {
  ModelOptions o = flops_options();
  const double C = 512, L = 4, S = 128;
  const auto cu = [](std::vector<int32_t> v) { return torch::tensor(v, torch::kInt32); };
  // One document a pack: the matmuls of the model convention, the causal half (and the diagonal)
  // of its full-square attention: 12 L C S^2 / 2 + 6 L C S.
  CHECK(loom::executed_flops(o, 128, cu({0, 128})) ==
        Approx(loom::model_flops_per_token(o, 128) * S - 6 * L * C * S * (S - 1)).epsilon(1e-12));
  // Documents of 100, 27 and 1 tokens: attention only within each, causal.
  const double matmuls = S * 6.0 * double(loom::matmul_parameters(o));
  CHECK(loom::executed_flops(o, 128, cu({0, 100, 127, 128})) ==
        Approx(matmuls + (100.0 * 101 + 27 * 28 + 1 * 2) * C * 6 * L).epsilon(1e-12));
  // Two micro-batch rows, 256 tokens: the rows' documents add up.
  CHECK(loom::executed_flops(o, 256, cu({0, 128, 256})) == Approx(2 * loom::executed_flops(o, 128, cu({0, 128}))));
  // Every layer recomputed: the matmul forwards of hardware_flops_per_token, attention's forward again.
  o.checkpoint = 1.0;
  CHECK(loom::executed_flops(o, 128, cu({0, 128})) ==
        Approx(loom::hardware_flops_per_token(o, 128) * S - 8 * L * C * S * (S - 1)).epsilon(1e-12));
}

TEST_CASE("the dense bf16 peak of known GPUs by the driver's name, none for others", "[flops]") {
  CHECK(loom::known_bf16_peak_tflops("NVIDIA H100 80GB HBM3") == 989.4);
  CHECK(loom::known_bf16_peak_tflops("NVIDIA H200") == 989.4);
  CHECK(loom::known_bf16_peak_tflops("NVIDIA H100 PCIe") == 756);
  CHECK(loom::known_bf16_peak_tflops("NVIDIA H100 NVL") == 835);
  CHECK(loom::known_bf16_peak_tflops("NVIDIA A100-SXM4-80GB") == 312);
  CHECK(loom::known_bf16_peak_tflops("NVIDIA L40S") == 362);
  CHECK(loom::known_bf16_peak_tflops("NVIDIA L4") == 121);
  CHECK(loom::known_bf16_peak_tflops("NVIDIA GeForce RTX 4090") == 0);
  CHECK(loom::known_bf16_peak_tflops("") == 0);
}

TEST_CASE("bad model options and inputs are rejected with clear messages", "[model]") {
  using Catch::Matchers::Contains;
  ModelOptions o = tiny_options();
  o.hidden_size = 66;
  CHECK_THROWS_WITH(o.validate(), Contains("model.hidden_size (66) must be a multiple of model.num_attention_heads (4)"));
  o = tiny_options();
  o.num_kv_attention_heads = 3;
  CHECK_THROWS_WITH(o.validate(),
                    Contains("model.num_attention_heads (4) must be a multiple of model.num_kv_attention_heads (3)"));
  o = tiny_options();
  o.checkpoint = 1.5;
  CHECK_THROWS_WITH(o.validate(), Contains("model.checkpoint must be a fraction in [0, 1], got 1.5"));
  o = tiny_options();
  o.dropout = 1.0;
  CHECK_THROWS_WITH(InternLM(o), Contains("model.dropout must be in [0, 1), got 1"));
  CHECK_THROWS_WITH(loom::parse_dtype("int8"),
                    "model.dtype: unknown dtype 'int8' (expected float32, bfloat16 or float16)");
  CHECK(loom::parse_dtype("torch.bfloat16") == torch::kBFloat16);
  CHECK(loom::dtype_name(loom::parse_dtype("fp16")) == "float16");

  torch::manual_seed(1);
  InternLM model(tiny_options());
  Batch b = make_batch({{random_doc(5, 97)}, {random_doc(8, 97)}}, 8);
  b.tokens[1][3] = 97;
  CHECK_THROWS_WITH(model->forward(b),
                    "token id 97 at batch row 1 position 3 is outside the model's vocabulary [0, 97) (model.vocab_size)");
  b.tokens[1][3] = 1;
  b.labels[0][2] = 120;
  CHECK_THROWS_WITH(loom::compute_loss(model->forward(b), b, 0.0),
                    "label 120 at batch row 0 position 2 is neither a class in [0, 97) nor the ignore index -100");
}

TEST_CASE("model runs in bfloat16 with the final norm and logits in float32", "[model]") {
  ModelOptions o = tiny_options();
  o.dtype = torch::kBFloat16;
  torch::manual_seed(3);
  InternLM m(o);
  CHECK(m->tok_embeddings->weight.scalar_type() == torch::kBFloat16);
  CHECK(m->norm->weight.scalar_type() == torch::kFloat32);
  const Batch b = make_batch({{random_doc(9, 97), random_doc(7, 97)}}, 16);
  const torch::Tensor logits = m->forward(b);
  CHECK(logits.scalar_type() == torch::kFloat32);
  // Same weights in float32: bf16 has 8 bits of mantissa, so ~1e-2 relative.
  o.dtype = torch::kFloat32;
  InternLM f(o);
  {
    torch::NoGradGuard no_grad;
    auto src = m->named_parameters();
    for (auto& p : f->named_parameters()) p.value().copy_(src[p.key()].to(torch::kFloat32));
  }
  const double err = rel_error(logits, f->forward(b).to(torch::kFloat64));
  CHECK(err < 5e-2);
  CHECK(err > 0);
}
