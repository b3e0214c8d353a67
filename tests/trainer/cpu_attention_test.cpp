// cpu_attention.h's segment attention against an independent float64 reference (plain LibTorch
// ops, one segment at a time, kv heads repeated as HF's repeat_kv), forward and gradients, on
// segments shorter and longer than a query block; determinism; bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "attention.h"
#include "cpu_attention.h"
#include "attention_select.h"
#include "attention_caps_fixture.h"
#include "flash_attention.h"
#include "loom/error.h"

namespace {

torch::Tensor cu_of(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu{0};
  for (int32_t n : lengths) cu.push_back(cu.back() + n);
  return torch::tensor(cu, torch::TensorOptions().dtype(torch::kInt32));
}

// softmax(q k^T * scale + causal) v per segment in float64, k and v repeated over each group of
// H/K query heads.
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const std::vector<int32_t>& lengths, double scale) {
  const int64_t G = q.size(1) / k.size(1);
  std::vector<torch::Tensor> parts;
  int64_t lo = 0;
  for (int32_t n : lengths) {
    const torch::Tensor qs = q.narrow(0, lo, n).transpose(0, 1);                                  // [H, n, D]
    const torch::Tensor ks = k.narrow(0, lo, n).repeat_interleave(G, 1).transpose(0, 1);          // [H, n, D]
    const torch::Tensor vs = v.narrow(0, lo, n).repeat_interleave(G, 1).transpose(0, 1);
    const torch::Tensor future = torch::ones({n, n}, torch::kBool).triu(1);
    const torch::Tensor scores = torch::matmul(qs, ks.transpose(1, 2)).mul(scale).masked_fill(future, -INFINITY);
    parts.push_back(torch::matmul(torch::softmax(scores, -1), vs).transpose(0, 1));  // [n, H, D]
    lo += n;
  }
  return torch::cat(parts, 0);
}

// Largest difference relative to b's largest magnitude, floored at 1: a one-token segment's dq and
// dk are exactly zero in float64 and rounding-sized in float32.
double rel_error(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.detach().to(torch::kFloat64), b64 = b.detach().to(torch::kFloat64);
  return (a64 - b64).abs().max().item<double>() / std::max(b64.abs().max().item<double>(), 1.0);
}

struct Grads {
  torch::Tensor out, dq, dk, dv;
};

// Output and input gradients for a fixed upstream gradient `dout`, in the inputs' dtype.
template <typename Fn>
Grads run(Fn fn, const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0, const torch::Tensor& dout,
          torch::Dtype dtype) {
  const auto leaf = [&](const torch::Tensor& t) { return t.detach().to(dtype).clone().requires_grad_(true); };
  torch::Tensor q = leaf(q0), k = leaf(k0), v = leaf(v0);
  torch::Tensor out = fn(q, k, v);
  (out * dout.to(dtype)).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

}  // namespace

TEST_CASE("segment attention equals per-document causal attention in float64, forward and backward",
          "[model][attention]") {
  struct Shape {
    int64_t H, K, D;
    std::vector<int32_t> lengths;
  };
  // Segments shorter than, equal to and longer than a query block (64), down to one token; GQA.
  const std::vector<Shape> shapes = {
      {4, 4, 8, {9, 7, 16}},
      {4, 2, 6, {150, 1, 64, 2, 39}},
      {8, 1, 4, {65, 128, 3}},
      {2, 2, 16, {1}},
  };
  for (const Shape& s : shapes) {
    int64_t tok = 0;
    for (int32_t n : s.lengths) tok += n;
    INFO("H " << s.H << " K " << s.K << " D " << s.D << " tokens " << tok << " segments " << s.lengths.size());
    torch::manual_seed(5 + tok);
    // Scaled up so attention is far from uniform and a wrong mask shows.
    const torch::Tensor q = torch::randn({tok, s.H, s.D}, torch::kFloat64) * 2;
    const torch::Tensor k = torch::randn({tok, s.K, s.D}, torch::kFloat64) * 2;
    const torch::Tensor v = torch::randn({tok, s.K, s.D}, torch::kFloat64);
    const torch::Tensor dout = torch::randn({tok, s.H, s.D}, torch::kFloat64);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
    const torch::Tensor cu = cu_of(s.lengths);
    int32_t longest = 0;
    for (int32_t n : s.lengths) longest = std::max(longest, n);

    const Grads ref = run([&](auto& a, auto& b, auto& c) { return reference(a, b, c, s.lengths, scale); }, q, k, v,
                          dout, torch::kFloat64);
    const Grads got = run([&](auto& a, auto& b, auto& c) { return loom::cpu_segment_attention(a, b, c, cu, longest, scale); },
                          q, k, v, dout, torch::kFloat32);
    REQUIRE(got.out.sizes() == q.sizes());
    REQUIRE(got.dk.sizes() == k.sizes());
    // fp32 against fp64: 1e-5 relative leaves a wide margin over rounding (~1e-6 observed), while
    // a key from another document or the future changes results by far more than 1e-2.
    CHECK(rel_error(got.out, ref.out) < 1e-5);
    CHECK(rel_error(got.dq, ref.dq) < 1e-5);
    CHECK(rel_error(got.dk, ref.dk) < 1e-5);
    CHECK(rel_error(got.dv, ref.dv) < 1e-5);

    // The comparison can fail: one segment fewer (two documents merged) is far off.
    if (s.lengths.size() > 1) {
      std::vector<int32_t> merged(s.lengths.begin() + 1, s.lengths.end());
      merged[0] += s.lengths[0];
      const torch::Tensor wrong =
          loom::cpu_segment_attention(q.to(torch::kFloat32), k.to(torch::kFloat32), v.to(torch::kFloat32), cu_of(merged),
                                      longest, scale);
      CHECK(rel_error(wrong, ref.out) > 1e-2);
    }
  }
}

TEST_CASE("segment attention is deterministic and reads strided q, k, v views", "[model][attention]") {
  torch::manual_seed(8);
  const int64_t tok = 200, H = 4, K = 2, D = 8;
  // q, k and v as views of one fused projection, as the model passes them.
  const torch::Tensor qkv = torch::randn({tok, (H + 2 * K) * D});
  const torch::Tensor q = qkv.narrow(1, 0, H * D).view({tok, H, D});
  const torch::Tensor k = qkv.narrow(1, H * D, K * D).view({tok, K, D});
  const torch::Tensor v = qkv.narrow(1, (H + K) * D, K * D).view({tok, K, D});
  const torch::Tensor cu = cu_of({70, 100, 30});
  const torch::Tensor dout = torch::randn({tok, H, D});
  const auto fn = [&](auto& a, auto& b, auto& c) { return loom::cpu_segment_attention(a, b, c, cu, 100, 0.3); };
  const Grads a = run(fn, q, k, v, dout, torch::kFloat32);
  const Grads b = run(fn, q, k, v, dout, torch::kFloat32);
  CHECK(torch::equal(a.out, b.out));
  CHECK(torch::equal(a.dq, b.dq));
  CHECK(torch::equal(a.dk, b.dk));
  CHECK(torch::equal(a.dv, b.dv));
  // The same values as contiguous tensors give the same bits.
  const auto fn_views = [&](auto& qq, auto& kk, auto& vv) {
    const torch::Tensor fused = torch::cat({qq.flatten(1), kk.flatten(1), vv.flatten(1)}, 1);
    return loom::cpu_segment_attention(fused.narrow(1, 0, H * D).view({tok, H, D}),
                                       fused.narrow(1, H * D, K * D).view({tok, K, D}),
                                       fused.narrow(1, (H + K) * D, K * D).view({tok, K, D}), cu, 100, 0.3);
  };
  const Grads c = run(fn_views, q.contiguous(), k.contiguous(), v.contiguous(), dout, torch::kFloat32);
  CHECK(torch::equal(a.out, c.out));
  CHECK(torch::equal(a.dq, c.dq));
}

TEST_CASE("segment attention rejects what it cannot compute", "[model][attention]") {
  const torch::Tensor q = torch::randn({10, 4, 8}), k = torch::randn({10, 2, 8});
  const auto message = [&](const torch::Tensor& qq, const torch::Tensor& kk, const torch::Tensor& cu) {
    try {
      loom::cpu_segment_attention(qq, kk, kk, cu, 10, 1.0);
    } catch (const loom::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message(q, k, cu_of({4, 5})), Catch::Contains("cu_seqlens must run from 0 to the 10 tokens"));
  CHECK_THAT(message(q, k, cu_of({4, 6}).to(torch::kInt64)), Catch::Contains("int32"));
  CHECK_THAT(message(q, torch::randn({10, 3, 8}), cu_of({10})), Catch::Contains("H a multiple of K"));
  CHECK_THAT(message(q.to(torch::kBFloat16), k.to(torch::kBFloat16), cu_of({10})),
             Catch::Contains("CPU float32"));
}

TEST_CASE("choose_attention: segment attention on CPU float32 only, or what job.attention names",
          "[model][attention]") {
  using loom::AttentionChoice;
  using loom::AttentionKernel;
  const loom::AttentionCaps cpu = loom::probe_attention_caps(torch::kCPU, 8);
  REQUIRE(cpu.cpu_segments);
  REQUIRE_FALSE(cpu.cuda);
  const auto kernel = [&](torch::Dtype dtype, AttentionChoice choice = AttentionChoice::kAuto) {
    return loom::choose_attention(cpu, dtype, 8, choice).kernel;
  };
  CHECK(kernel(torch::kFloat32) == AttentionKernel::kCpuSegments);
  CHECK(kernel(torch::kBFloat16) == AttentionKernel::kMasked);
  CHECK(kernel(torch::kFloat32, AttentionChoice::kMasked) == AttentionKernel::kMasked);
  CHECK(kernel(torch::kFloat32, AttentionChoice::kSegments) == AttentionKernel::kCpuSegments);
  CHECK_THROWS_WITH(kernel(torch::kFloat32, AttentionChoice::kFlash), Catch::Contains("job.attention=flash cannot run here: "));
  CHECK_THROWS_WITH(kernel(torch::kFloat32, AttentionChoice::kCudnn), Catch::Contains("job.attention=cudnn cannot run here: "));
  CHECK_THROWS_WITH(kernel(torch::kBFloat16, AttentionChoice::kSegments),
                    Catch::Contains("job.attention=segments runs on CPU float32"));
  CHECK(loom::make_attention_kernel(AttentionKernel::kCpuSegments, torch::kCPU, torch::kFloat32, 8));
  CHECK_FALSE(loom::make_attention_kernel(AttentionKernel::kMasked, torch::kCPU, torch::kFloat32, 8));
  CHECK(loom::parse_attention_kernel("auto") == AttentionChoice::kAuto);
  CHECK(loom::parse_attention_kernel("masked") == AttentionChoice::kMasked);
  CHECK(loom::parse_attention_kernel("cudnn") == AttentionChoice::kCudnn);
  CHECK_THROWS_WITH(loom::parse_attention_kernel("sdpa"),
                    Catch::Contains("expected auto, cudnn, flash, segments or masked"));
}

// The rule over every kind of CUDA device it can meet, without one: caps written out by hand.
TEST_CASE("choose_attention: the rule on CUDA devices, from their capabilities alone", "[model][attention]") {
  using loom::AttentionChoice;
  using loom::AttentionKernel;
  const loom::test::MadeUpDevices made_up;
  const loom::AttentionCaps &hopper = made_up.hopper, &ampere = made_up.ampere, &no_cudnn = made_up.no_cudnn;
  const auto pick = [](const loom::AttentionCaps& caps, torch::Dtype dtype, int64_t d,
                       AttentionChoice choice = AttentionChoice::kAuto) {
    return loom::choose_attention(caps, dtype, d, choice).kernel;
  };
  CHECK(pick(hopper, torch::kBFloat16, 128) == AttentionKernel::kCudnnSegments);
  CHECK(pick(hopper, torch::kFloat16, 64) == AttentionKernel::kCudnnSegments);
  CHECK(pick(hopper, torch::kBFloat16, 256) == AttentionKernel::kFlashVarlen);  // beyond cuDNN's head dims
  CHECK(pick(hopper, torch::kFloat32, 128) == AttentionKernel::kMasked);
  CHECK(pick(ampere, torch::kBFloat16, 128) == AttentionKernel::kFlashVarlen);
  CHECK(pick(no_cudnn, torch::kBFloat16, 128) == AttentionKernel::kFlashVarlen);
  CHECK(pick(hopper, torch::kBFloat16, 128, AttentionChoice::kCudnn) == AttentionKernel::kCudnnSegments);
  CHECK(pick(ampere, torch::kBFloat16, 128, AttentionChoice::kCudnn) == AttentionKernel::kCudnnSegments);
  CHECK(pick(hopper, torch::kBFloat16, 128, AttentionChoice::kFlash) == AttentionKernel::kFlashVarlen);
  CHECK_THROWS_WITH(pick(no_cudnn, torch::kBFloat16, 128, AttentionChoice::kCudnn),
                    Catch::Contains("this build has no cuDNN attention"));
  CHECK_THROWS_WITH(pick(hopper, torch::kBFloat16, 256, AttentionChoice::kCudnn),
                    Catch::Contains("head dim 256 is not a multiple of 8 up to 128"));
  CHECK_THROWS_WITH(pick(hopper, torch::kFloat32, 128, AttentionChoice::kFlash), Catch::Contains("activations are Float"));
  // A GPU not visible (loom-train plan elsewhere): flash, and the plan says it assumed so.
  const loom::AttentionCaps assumed = loom::assumed_attention_caps(true);
  CHECK(pick(assumed, torch::kBFloat16, 128) == AttentionKernel::kFlashVarlen);
  CHECK_THAT(assumed.source, Catch::StartsWith("assumed"));
  CHECK(std::string(loom::attention_kernel_key(AttentionKernel::kCudnnSegments)) == "cudnn");
}

// job.deterministic: never cuDNN (its backward has no deterministic mode), whatever the device.
TEST_CASE("choose_attention: job.deterministic takes flash, never cuDNN", "[model][attention]") {
  using loom::AttentionChoice;
  using loom::AttentionKernel;
  const loom::AttentionCaps hopper = loom::test::MadeUpDevices().hopper;
  loom::AttentionCaps cudnn_only = hopper;
  cudnn_only.flash = false;
  cudnn_only.why_no_flash = "no flash in this build";
  const auto plan = [](const loom::AttentionCaps& caps, AttentionChoice choice, int64_t d = 128) {
    return loom::choose_attention(caps, torch::kBFloat16, d, choice, /*deterministic=*/true);
  };
  const loom::AttentionPlan a = plan(hopper, AttentionChoice::kAuto);
  CHECK(a.kernel == AttentionKernel::kFlashVarlen);
  CHECK_THAT(a.why, Catch::Contains("job.deterministic=true"));
  CHECK(plan(hopper, AttentionChoice::kFlash).kernel == AttentionKernel::kFlashVarlen);
  CHECK(plan(hopper, AttentionChoice::kMasked).kernel == AttentionKernel::kMasked);
  CHECK_THROWS_WITH(plan(hopper, AttentionChoice::kCudnn),
                    Catch::Contains("job.attention=cudnn cannot run here: job.deterministic=true"));
  // Neither flash nor cuDNN: the math path (deterministic matmuls and softmax).
  CHECK(plan(cudnn_only, AttentionChoice::kAuto).kernel == AttentionKernel::kMasked);
  // The same caps without the flag: what the flag changed.
  CHECK(loom::choose_attention(hopper, torch::kBFloat16, 128, AttentionChoice::kAuto).kernel ==
        AttentionKernel::kCudnnSegments);
  CHECK(loom::choose_attention(cudnn_only, torch::kBFloat16, 128, AttentionChoice::kAuto).kernel ==
        AttentionKernel::kCudnnSegments);
  // CPU float32: segment attention, deterministic by its fixed block order.
  const loom::AttentionCaps cpu = loom::probe_attention_caps(torch::kCPU, 8);
  CHECK(loom::choose_attention(cpu, torch::kFloat32, 8, AttentionChoice::kAuto, true).kernel ==
        AttentionKernel::kCpuSegments);
}
