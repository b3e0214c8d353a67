// The fused CPU kernels of trainer/kernels/cpu_kernels.h (RMSNorm, the SwiGLU gate, the QKV split with
// rotary), reached through fused_ops.h's dispatch as the model reaches them, against fused_ops.cpp's
// plain-LibTorch references run in float64 on the same inputs: outputs and gradients, on odd shapes
// (rows not a multiple of a chunk, C = 40, D = 6, GQA H = 4 K = 2), non-contiguous inputs and
// unused outputs; bitwise determinism across runs and thread counts; bad input and fallbacks.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "fused_ops.h"
#include "loom/error.h"

namespace {

using Tensors = std::vector<torch::Tensor>;
using Fn = std::function<Tensors(const Tensors&)>;

// fp32 against float64: fp32's eps is 1.2e-7 and the kernels' sums run over at most a few hundred
// terms (up to 5e-7 observed); 1e-5 leaves a wide margin while a wrong formula, index or missing
// term gives > 1e-2.
constexpr double kTol = 1e-5;

// max |a - b| / max |b|, in float64.
double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.detach().to(torch::kFloat64), b64 = b.detach().to(torch::kFloat64);
  return (a64 - b64).abs().max().item<double>() / std::max(b64.abs().max().item<double>(), 1e-30);
}

// f's outputs, then the gradient of sum_i sum(out_i * ups_i) w.r.t. each input (an undefined
// ups_i leaves out_i unused). The inputs become leaves of the given dtype.
Tensors run(const Fn& f, const Tensors& inputs, const Tensors& ups, torch::Dtype dtype) {
  Tensors leaves;
  for (const auto& t : inputs) leaves.push_back(t.detach().to(dtype).clone().requires_grad_(true));
  const Tensors outs = f(leaves);
  REQUIRE(outs.size() == ups.size());
  torch::Tensor loss = torch::zeros({}, torch::kFloat64);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (ups[i].defined()) loss = loss + (outs[i].to(torch::kFloat64) * ups[i].to(torch::kFloat64)).sum();
  }
  loss.backward();
  Tensors r;
  for (const auto& o : outs) r.push_back(o.detach());
  for (const auto& l : leaves) r.push_back(l.grad());
  return r;
}

// The fused run (fp32) against the reference run (float64), output by output, gradient by gradient.
void check_close(const Fn& fused, const Fn& reference, const Tensors& inputs, const Tensors& ups) {
  const Tensors got = run(fused, inputs, ups, torch::kFloat32);
  const Tensors want = run(reference, inputs, ups, torch::kFloat64);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("result " << i << " of " << got.size());
    REQUIRE(got[i].defined());
    CHECK(got[i].scalar_type() == torch::kFloat32);
    CHECK(got[i].sizes() == want[i].sizes());
    CHECK(rel_err(got[i], want[i]) < kTol);
  }
}

// Whether t came out of the named autograd function (the dispatch took the CPU kernel).
bool made_by(const torch::Tensor& t, const std::string& fn) {
  return t.grad_fn() != nullptr && t.grad_fn()->name().find(fn) != std::string::npos;
}

Fn rmsnorm_fused(double eps) {
  return [eps](const Tensors& in) {
    const torch::Tensor y = loom::fused_rmsnorm(in[0], in[1], eps);
    CHECK(made_by(y, "RMSNormFn"));
    return Tensors{y};
  };
}
Fn rmsnorm_ref(double eps) {
  return [eps](const Tensors& in) { return Tensors{loom::rmsnorm_reference(in[0], in[1], eps)}; };
}

Tensors swiglu_fused(const Tensors& in) {
  const torch::Tensor y = loom::fused_swiglu(in[0], in[1]);
  CHECK(made_by(y, "SwiGLUFn"));
  return {y};
}
Tensors swiglu_ref(const Tensors& in) { return {loom::swiglu_reference(in[0], in[1])}; }

// Rotary tables for random positions as make_packed_context builds them: the D angles of each
// token are the D/2 angles twice; cos/sin [B, T, D/2] are the first half, a strided view.
struct Tables {
  torch::Tensor cos, sin;
};
Tables tables(int64_t B, int64_t T, int64_t D, bool contiguous) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  const torch::Tensor inv_freq = 1.0 / torch::pow(10000.0, torch::arange(0, D, 2, f32) / static_cast<double>(D));
  const torch::Tensor pos = torch::randint(0, 1000, {B, T}, f32);
  const torch::Tensor angles = pos.unsqueeze(-1) * inv_freq;
  const torch::Tensor full = torch::cat({angles, angles}, -1);  // [B, T, D]
  Tables t{full.cos().narrow(-1, 0, D / 2), full.sin().narrow(-1, 0, D / 2)};
  if (contiguous) t = {t.cos.contiguous(), t.sin.contiguous()};
  return t;
}

// q, k, v of qkv [B, T, (H + 2K) D] from slices, views and rotary_reference: the unfused model's way.
Fn qkv_ref(int64_t H, int64_t K, const Tables& tb) {
  return [=](const Tensors& in) {
    const torch::Tensor& qkv = in[0];
    const int64_t W = qkv.size(-1), D = W / (H + 2 * K);
    std::vector<int64_t> lead(qkv.sizes().begin(), qkv.sizes().end() - 1), qs = lead, ks = lead;
    qs.push_back(H), qs.push_back(D);
    ks.push_back(K), ks.push_back(D);
    return Tensors{loom::rotary_reference(qkv.narrow(-1, 0, H * D).reshape(qs), tb.cos, tb.sin),
                   loom::rotary_reference(qkv.narrow(-1, H * D, K * D).reshape(ks), tb.cos, tb.sin),
                   qkv.narrow(-1, (H + K) * D, K * D).reshape(ks)};
  };
}
Fn qkv_fused(int64_t H, int64_t K, const Tables& tb) {
  return [=](const Tensors& in) {
    REQUIRE(loom::fused_qkv_rotary_applies(in[0]));
    const Tensors r = loom::fused_qkv_rotary(in[0], H, K, tb.cos, tb.sin);
    REQUIRE(r.size() == 3);
    for (const auto& t : r) {
      CHECK(t.is_contiguous());
      CHECK(made_by(t, "QkvRotaryFn"));
    }
    return r;
  };
}

// Runs f under n intra-op threads and restores the previous count.
Tensors with_threads(int n, const std::function<Tensors()>& f) {
  const int before = at::get_num_threads();
  at::set_num_threads(n);
  Tensors r = f();
  at::set_num_threads(before);
  return r;
}

bool bitwise_equal(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined() || !b[i].defined() || !torch::equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("CPU RMSNorm equals the float64 reference forward and backward", "[cpu_kernels]") {
  torch::manual_seed(11);
  // rows: 111 (not a multiple of the 32-row dw chunk), 1505 (many chunks, every thread), 7, 1;
  // C: 40, 256, 3 (shorter than a SIMD lane group), 8.
  const std::vector<std::vector<int64_t>> shapes{{3, 37, 40}, {5, 301, 256}, {7, 3}, {8}};
  for (const auto& shape : shapes) {
    INFO("x " << torch::IntArrayRef(shape));
    const int64_t C = shape.back();
    const torch::Tensor x = torch::randn(shape) * 3 + 0.5;
    const torch::Tensor w = torch::rand({C}) + 0.5;
    check_close(rmsnorm_fused(1e-5), rmsnorm_ref(1e-5), {x, w}, {torch::randn(shape)});
  }
  // Rows of very different scales, and a zero row (rstd = 1/sqrt(eps)).
  torch::Tensor x = torch::randn({4, 40}) * torch::tensor({1e-3, 1.0, 1e3, 0.0}).unsqueeze(1);
  check_close(rmsnorm_fused(1e-6), rmsnorm_ref(1e-6), {x, torch::rand({40}) + 0.5}, {torch::randn({4, 40})});
}

TEST_CASE("CPU SwiGLU equals the float64 reference forward and backward", "[cpu_kernels]") {
  torch::manual_seed(12);
  // [4, 64, 768] is split over threads; the others run in one piece, with a tail shorter than a lane group.
  const std::vector<std::vector<int64_t>> shapes{{3, 37, 40}, {4, 64, 768}, {5}};
  for (const auto& shape : shapes) {
    INFO("a " << torch::IntArrayRef(shape));
    check_close(swiglu_fused, swiglu_ref, {torch::randn(shape) * 4, torch::randn(shape)}, {torch::randn(shape)});
  }
  SECTION("across exp's range, past the clamp at |a| = 87") {
    const torch::Tensor a = torch::linspace(-120, 120, 4801);  // steps of 0.05: -88, -87, 87, 88 included
    check_close(swiglu_fused, swiglu_ref, {a, torch::randn({4801})}, {torch::randn({4801})});
    // Relative error element by element, where the max-scaled error above could hide a small one.
    const torch::Tensor y = loom::fused_swiglu(a, torch::ones({4801})).detach().to(torch::kFloat64);
    const torch::Tensor want = torch::silu(a.to(torch::kFloat64));
    const torch::Tensor big = want.abs() > 1e-30;
    CHECK(((y - want).abs() / want.abs()).masked_select(big).max().item<double>() < 1e-6);
  }
  SECTION("NaN stays NaN") {
    torch::Tensor a = torch::randn({40});
    a[7] = std::numeric_limits<float>::quiet_NaN();
    const torch::Tensor y = loom::fused_swiglu(a, torch::ones({40}));
    CHECK(std::isnan(y[7].item<float>()));
    CHECK(torch::isfinite(y.narrow(0, 0, 7)).all().item<bool>());
    CHECK(torch::isfinite(y.narrow(0, 8, 32)).all().item<bool>());
  }
}

TEST_CASE("CPU QKV split with rotary equals the float64 reference forward and backward", "[cpu_kernels]") {
  torch::manual_seed(13);
  struct Case {
    int64_t B, T, H, K, D;
  };
  // GQA with D = 6 (half = 3, no full lane group), MHA at the bench's shape, the smallest D.
  for (const Case& c : {Case{2, 37, 4, 2, 6}, Case{2, 256, 8, 8, 32}, Case{1, 5, 2, 1, 2}}) {
    for (bool contiguous_tables : {false, true}) {
      INFO("B " << c.B << " T " << c.T << " H " << c.H << " K " << c.K << " D " << c.D << " contiguous tables "
                << contiguous_tables);
      const Tables tb = tables(c.B, c.T, c.D, contiguous_tables);
      const torch::Tensor qkv = torch::randn({c.B, c.T, (c.H + 2 * c.K) * c.D});
      const torch::Tensor uq = torch::randn({c.B, c.T, c.H, c.D}), uk = torch::randn({c.B, c.T, c.K, c.D}),
                          uv = torch::randn({c.B, c.T, c.K, c.D});
      check_close(qkv_fused(c.H, c.K, tb), qkv_ref(c.H, c.K, tb), {qkv}, {uq, uk, uv});
    }
  }
  SECTION("an unused output leaves a zero slice of the gradient") {
    const int64_t B = 2, T = 37, H = 4, K = 2, D = 6;
    const Tables tb = tables(B, T, D, false);
    const torch::Tensor qkv = torch::randn({B, T, (H + 2 * K) * D});
    const torch::Tensor uq = torch::randn({B, T, H, D}), uk = torch::randn({B, T, K, D}),
                        uv = torch::randn({B, T, K, D});
    for (const Tensors& ups : {Tensors{uq, uk, {}}, Tensors{{}, uk, uv}, Tensors{uq, {}, uv}}) {
      check_close(qkv_fused(H, K, tb), qkv_ref(H, K, tb), {qkv}, ups);
      const torch::Tensor g = run(qkv_fused(H, K, tb), {qkv}, ups, torch::kFloat32)[3];
      const int64_t unused = !ups[0].defined() ? 0 : !ups[1].defined() ? 1 : 2;
      const int64_t lo = unused == 0 ? 0 : unused == 1 ? H * D : (H + K) * D, width = unused == 0 ? H * D : K * D;
      CHECK(g.narrow(-1, lo, width).abs().max().item<float>() == 0.0f);
    }
  }
}

TEST_CASE("CPU kernels take non-contiguous inputs", "[cpu_kernels]") {
  torch::manual_seed(14);
  SECTION("RMSNorm: every other element of a row, and transposed rows") {
    const torch::Tensor w = torch::rand({40}) + 0.5;
    const Fn strided = [](const Tensors& in) { return rmsnorm_fused(1e-5)({in[0].slice(-1, 0, 80, 2), in[1]}); };
    const Fn strided_ref = [](const Tensors& in) { return rmsnorm_ref(1e-5)({in[0].slice(-1, 0, 80, 2), in[1]}); };
    check_close(strided, strided_ref, {torch::randn({3, 37, 80}), w}, {torch::randn({3, 37, 40})});
    const Fn transposed = [](const Tensors& in) { return rmsnorm_fused(1e-5)({in[0].transpose(0, 1), in[1]}); };
    const Fn transposed_ref = [](const Tensors& in) { return rmsnorm_ref(1e-5)({in[0].transpose(0, 1), in[1]}); };
    check_close(transposed, transposed_ref, {torch::randn({37, 3, 40}), w}, {torch::randn({3, 37, 40})});
  }
  SECTION("SwiGLU: a strided, b transposed") {
    const auto views = [](const Tensors& in) { return Tensors{in[0].slice(-1, 1, 81, 2), in[1].transpose(0, 1)}; };
    check_close([&](const Tensors& in) { return swiglu_fused(views(in)); },
                [&](const Tensors& in) { return swiglu_ref(views(in)); },
                {torch::randn({37, 81}) * 4, torch::randn({40, 37})}, {torch::randn({37, 40})});
  }
  SECTION("QKV: a column slice of a wider projection") {
    const int64_t B = 2, T = 37, H = 4, K = 2, D = 6, W = (H + 2 * K) * D;
    const Tables tb = tables(B, T, D, false);
    const auto view = [=](const Tensors& in) { return Tensors{in[0].narrow(-1, 5, W)}; };
    REQUIRE(!view({torch::randn({B, T, W + 9})})[0].is_contiguous());
    check_close([&](const Tensors& in) { return qkv_fused(H, K, tb)(view(in)); },
                [&](const Tensors& in) { return qkv_ref(H, K, tb)(view(in)); }, {torch::randn({B, T, W + 9})},
                {torch::randn({B, T, H, D}), torch::randn({B, T, K, D}), torch::randn({B, T, K, D})});
  }
}

TEST_CASE("CPU kernels are bitwise deterministic across runs and thread counts", "[cpu_kernels]") {
  torch::manual_seed(15);
  const auto same_everywhere = [](const Fn& f, const Tensors& inputs, const Tensors& ups) {
    const auto once = [&] { return run(f, inputs, ups, torch::kFloat32); };
    const Tensors first = with_threads(2, once);
    CHECK(bitwise_equal(first, with_threads(2, once)));
    CHECK(bitwise_equal(first, with_threads(1, once)));
    CHECK(bitwise_equal(first, with_threads(3, once)));
  };
  SECTION("RMSNorm, dw summed over 48 chunks") {
    same_everywhere(rmsnorm_fused(1e-5), {torch::randn({5, 301, 256}), torch::rand({256}) + 0.5},
                    {torch::randn({5, 301, 256})});
  }
  SECTION("SwiGLU") {
    same_everywhere(swiglu_fused, {torch::randn({4, 64, 768}), torch::randn({4, 64, 768})},
                    {torch::randn({4, 64, 768})});
  }
  SECTION("QKV rotary") {
    const Tables tb = tables(2, 256, 32, false);
    same_everywhere(qkv_fused(8, 2, tb), {torch::randn({2, 256, 12 * 32})},
                    {torch::randn({2, 256, 8, 32}), torch::randn({2, 256, 2, 32}), torch::randn({2, 256, 2, 32})});
  }
}

TEST_CASE("CPU kernels reject bad input, and other dtypes take the references", "[cpu_kernels]") {
  const torch::Tensor x = torch::randn({3, 40});
  CHECK_THROWS_AS(loom::cpu::rmsnorm(x.to(torch::kBFloat16), torch::ones({40}), 1e-5), loom::Error);
  CHECK_THROWS_AS(loom::cpu::rmsnorm(x, torch::ones({41}), 1e-5), loom::Error);
  CHECK_THROWS_AS(loom::cpu::rmsnorm(x, torch::ones({40}), -1.0), loom::Error);
  CHECK_THROWS_AS(loom::cpu::swiglu(x, torch::randn({40, 3})), loom::Error);
  CHECK_THROWS_AS(loom::cpu::swiglu(x, x.to(torch::kFloat64)), loom::Error);
  const Tables tb = tables(1, 3, 6, true);
  const torch::Tensor qkv = torch::randn({1, 3, 8 * 6});
  CHECK_THROWS_AS(loom::cpu::qkv_rotary(qkv, 4, 3, tb.cos, tb.sin), loom::Error);  // 48 % (4 + 6) != 0
  CHECK_THROWS_AS(loom::cpu::qkv_rotary(qkv, 4, 2, tb.cos.narrow(-1, 0, 2), tb.sin.narrow(-1, 0, 2)), loom::Error);
  CHECK_THROWS_AS(loom::fused_qkv_rotary(qkv, 4, 2, tb.cos.narrow(1, 0, 2), tb.sin.narrow(1, 0, 2)), loom::Error);
  CHECK(loom::cpu::qkv_rotary(qkv, 4, 2, tb.cos, tb.sin).size() == 3);

  CHECK(loom::cpu_fused_applies(x));
  CHECK(!loom::cpu_fused_applies(x.to(torch::kBFloat16)));
  CHECK(!loom::cpu_fused_applies(x.to(torch::kFloat64)));
  CHECK(loom::fused_qkv_rotary_applies(qkv));
  CHECK(!loom::fused_qkv_rotary_applies(qkv.to(torch::kBFloat16)));
  CHECK(!loom::fused_qkv_rotary_applies(torch::randn({48})));
  CHECK(!loom::fused_qkv_rotary_applies(torch::randn({0, 48})));

  // bf16 and float64 on CPU: the dispatch runs the reference itself.
  for (auto dtype : {torch::kBFloat16, torch::kFloat64}) {
    const torch::Tensor xd = x.to(dtype).requires_grad_(true), wd = torch::ones({40}, dtype).requires_grad_(true);
    const torch::Tensor y = loom::fused_rmsnorm(xd, wd, 1e-5);
    CHECK(!made_by(y, "RMSNormFn"));
    CHECK(torch::equal(y, loom::rmsnorm_reference(xd, wd, 1e-5)));
    const torch::Tensor g = loom::fused_swiglu(xd, xd);
    CHECK(!made_by(g, "SwiGLUFn"));
    CHECK(torch::equal(g, loom::swiglu_reference(xd, xd)));
  }
}
