// The CUDA attention kernels (trainer/kernels/flash_attention.h, cudnn_attention.h) on the GPU
// against attention computed one document at a time in fp32, and against attention.h's masked path.
// Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "attention.h"
#include "attention_select.h"
#include "cudnn_attention.h"
#include "flash_attention.h"
#include "gpu_util.h"

namespace {

using loom::test::cuda;
using loom::test::rel_err;

// Causal attention over each segment alone, in q's dtype (float64 for the references below), k/v heads shared by groups of H/K query heads.
torch::Tensor per_document_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const std::vector<int32_t>& cu) {
  const int64_t H = q.size(1), K = k.size(1), D = q.size(2);
  std::vector<torch::Tensor> outs;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int64_t a = cu[s], n = cu[s + 1] - cu[s];
    const torch::Tensor qs = q.narrow(0, a, n).transpose(0, 1);                              // [H, n, D]
    const torch::Tensor ks = k.narrow(0, a, n).repeat_interleave(H / K, 1).transpose(0, 1);  // [H, n, D]
    const torch::Tensor vs = v.narrow(0, a, n).repeat_interleave(H / K, 1).transpose(0, 1);
    torch::Tensor scores = torch::matmul(qs, ks.transpose(1, 2)) / std::sqrt(double(D));
    const torch::Tensor future = torch::ones({n, n}, torch::dtype(torch::kBool).device(q.device())).triu(1);
    scores = scores.masked_fill(future, -INFINITY);
    outs.push_back(torch::matmul(torch::softmax(scores, -1), vs).transpose(0, 1));  // [n, H, D]
  }
  return torch::cat(outs, 0);
}

// Runs attention(q, k, v, D) on random inputs of `dtype` (bf16 or fp16) over the documents of cu (8
// query heads on 2 kv heads, head dims 64 and 128) and checks the output and the three gradients
// against per_document_attention in float64: over all tokens, and document by document (a view or a
// pad that leaked across documents would show in one document, not in the maximum).
template <typename Attention>
void check_per_document(const std::vector<int32_t>& cu, uint64_t seed, Attention&& attention,
                        torch::Dtype dtype = torch::kBFloat16) {
  const int64_t Tok = cu.back(), H = 8, K = 2;
  // bf16 keeps 8 significant bits, ~0.4% of the scale per rounding; fp16 11.
  const double out_tol = dtype == torch::kHalf ? 5e-3 : 1e-2, grad_tol = dtype == torch::kHalf ? 1e-2 : 2e-2;
  for (int64_t D : {64, 128}) {
    INFO("head dim " << D);
    torch::manual_seed(seed);
    const auto bf = torch::TensorOptions().device(cuda()).dtype(dtype);
    const torch::Tensor q = torch::randn({Tok, H, D}, bf).requires_grad_(true);
    const torch::Tensor k = torch::randn({Tok, K, D}, bf).requires_grad_(true);
    const torch::Tensor v = torch::randn({Tok, K, D}, bf).requires_grad_(true);
    const torch::Tensor out = attention(q, k, v, D);
    REQUIRE(out.sizes() == q.sizes());
    REQUIRE(out.scalar_type() == dtype);

    const torch::Tensor qf = q.detach().to(torch::kFloat64).requires_grad_(true);
    const torch::Tensor kf = k.detach().to(torch::kFloat64).requires_grad_(true);
    const torch::Tensor vf = v.detach().to(torch::kFloat64).requires_grad_(true);
    const torch::Tensor ref = per_document_attention(qf, kf, vf, cu);
    CHECK(rel_err(out, ref) < out_tol);
    const torch::Tensor up = torch::randn({Tok, H, D}, bf);
    out.backward(up);
    ref.backward(up.to(torch::kFloat64));
    CHECK(rel_err(q.grad(), qf.grad()) < grad_tol);
    CHECK(rel_err(k.grad(), kf.grad()) < grad_tol);
    CHECK(rel_err(v.grad(), vf.grad()) < grad_tol);
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      INFO("document " << s);
      const int64_t a = cu[s], n = cu[s + 1] - cu[s];
      if (n == 0) continue;  // an empty document has no rows to compare
      CHECK(rel_err(out.narrow(0, a, n), ref.narrow(0, a, n)) < out_tol);
      // A one-token document's query and key gradients are zero (its one weight is 1 whatever the
      // score): only rounding is left there, with nothing to measure it against.
      if (n > 1) CHECK(rel_err(q.grad().narrow(0, a, n), qf.grad().narrow(0, a, n)) < grad_tol);
      if (n > 1) CHECK(rel_err(k.grad().narrow(0, a, n), kf.grad().narrow(0, a, n)) < grad_tol);
      CHECK(rel_err(v.grad().narrow(0, a, n), vf.grad().narrow(0, a, n)) < grad_tol);
    }
  }
}

}  // namespace

TEST_CASE("flash varlen attention equals per-document attention forward and backward") {
  // Two rows of 512 tokens; documents of 1, 99, 412 | 188, 1, 323 tokens (a row boundary at 512).
  const std::vector<int32_t> cu{0, 1, 100, 512, 700, 701, 1024};
  const torch::Tensor cu_t = torch::tensor(cu, torch::kInt32).to(cuda());
  check_per_document(cu, 7, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t D) {
    return loom::flash_varlen_attention(q, k, v, cu_t, 412, 1.0 / std::sqrt(double(D)));
  });
}

// The kernel the rule of attention_select.h makes, built as the run builds it.
loom::VarlenAttentionFn kernel_of(loom::AttentionKernel kernel, int64_t H, int64_t K, int64_t D, int64_t T,
                                  std::shared_ptr<loom::AttentionUse> use = nullptr) {
  return loom::make_attention_kernel(kernel, cuda(), torch::kBFloat16, D, loom::AttentionShape{H, K, T, false}, use);
}

TEST_CASE("packed attention through flash equals the masked path on every real token") {
  const loom::Batch b = loom::test::make_packed_batch({{100, 28, 3}, {64, 64, 100}}, 256, 1000, 11).to(cuda());
  const int64_t B = 2, T = 256, H = 4, K = 4, D = 64;
  const loom::PackedContext ctx = loom::make_packed_context(b, D, 10000.0);
  torch::manual_seed(12);
  const auto bf = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  const torch::Tensor q = torch::randn({B, T, H, D}, bf), k = torch::randn({B, T, K, D}, bf),
                      v = torch::randn({B, T, K, D}, bf);
  const torch::Tensor masked = loom::masked_attention(q.to(torch::kFloat32), k.to(torch::kFloat32),
                                                      v.to(torch::kFloat32), ctx.mask);
  const torch::Tensor flash = loom::packed_attention(
      q, k, v, loom::make_packed_context(b, D, 10000.0, kernel_of(loom::AttentionKernel::kFlashVarlen, H, K, D, T)));
  const torch::Tensor real = (b.segments >= 0).unsqueeze(-1).unsqueeze(-1);  // padding differs by design
  CHECK(rel_err(flash * real, masked * real) < 1e-2);
}

TEST_CASE("choose_attention on this GPU: cudnn on Hopper, else flash, for bf16, masked for fp32") {
  const loom::AttentionCaps caps = loom::probe_attention_caps(cuda(), 128);
  REQUIRE(caps.flash);
  const auto pick = [&](torch::Dtype dtype, int64_t d, loom::AttentionChoice choice = loom::AttentionChoice::kAuto) {
    return loom::choose_attention(caps, dtype, d, choice).kernel;
  };
  const auto fast = caps.hopper && caps.cudnn ? loom::AttentionKernel::kCudnnSegments : loom::AttentionKernel::kFlashVarlen;
  CHECK(pick(torch::kBFloat16, 128) == fast);
  CHECK(pick(torch::kBFloat16, 128, loom::AttentionChoice::kFlash) == loom::AttentionKernel::kFlashVarlen);
  // A head dim cuDNN's kernel lacks: auto falls back to flash, a named cudnn is an error.
  CHECK(pick(torch::kBFloat16, 256) == loom::AttentionKernel::kFlashVarlen);
  CHECK_THROWS_WITH(pick(torch::kBFloat16, 256, loom::AttentionChoice::kCudnn),
                    Catch::Contains("job.attention=cudnn cannot run here: head dim 256"));
  std::string why;
  CHECK_FALSE(loom::flash_attention_supported(cuda(), torch::kFloat32, 128, &why));
  CHECK(why == "activations are Float, flash attention takes bf16 or fp16");
  CHECK(pick(torch::kFloat32, 128) == loom::AttentionKernel::kMasked);
  CHECK_FALSE(loom::flash_attention_supported(torch::kCPU, torch::kBFloat16, 128, &why));
  CHECK(why == "the device is cpu, not CUDA");
}

namespace {

// cu_seqlens of one pack of `tokens` holding `documents` documents: lengths drawn around the mean,
// the first document of 1 token and the last one cut at the pack's end (whatever is left).
std::vector<int32_t> pack_of(int64_t documents, int64_t tokens, uint64_t seed) {
  std::vector<int32_t> cu{0};
  if (documents > 1) cu.push_back(1);
  torch::manual_seed(seed);
  const int64_t mean = tokens / documents;
  while (static_cast<int64_t>(cu.size()) < documents) {
    const int64_t n = 1 + torch::randint(2 * mean, {1}).item<int64_t>();
    if (cu.back() + n >= tokens) break;
    cu.push_back(static_cast<int32_t>(cu.back() + n));
  }
  cu.push_back(static_cast<int32_t>(tokens));
  return cu;
}

}  // namespace

// The kernel's both branches, on packs of 1, 2, 60 and 250 documents (a document of 1 token, one cut
// at the pack's end) with the graphs a run builds for its seq_len: output and gradients against
// float64 per-document attention, and the branch each density took (windows below
// kCudnnWindowMeanTokens tokens a document: the 250).
TEST_CASE("cudnn equals per-document attention at every density and takes the branch of its rule") {
  const loom::AttentionCaps caps = loom::probe_attention_caps(cuda(), 128);
  if (!caps.cudnn) {
    WARN("no cuDNN attention here (" << caps.why_no_cudnn << "): the rule's cuDNN branch is not tested");
    return;
  }
  for (int64_t documents : {1, 2, 60, 250}) {
    INFO(documents << " documents");
    const std::vector<int32_t> cu = pack_of(documents, 4096, 40 + static_cast<uint64_t>(documents));
    const int64_t docs = static_cast<int64_t>(cu.size()) - 1;
    const torch::Tensor cu_host = torch::tensor(cu, torch::kInt32), cu_dev = cu_host.to(cuda());
    int64_t longest = 0;
    for (size_t s = 0; s + 1 < cu.size(); ++s) longest = std::max<int64_t>(longest, cu[s + 1] - cu[s]);
    auto use = std::make_shared<loom::AttentionUse>();
    check_per_document(cu, 9, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t D) {
      const loom::VarlenAttentionFn fn = kernel_of(loom::AttentionKernel::kCudnnSegments, 8, 2, D, 4096, use);
      return fn(q, k, v, cu_dev, cu_host, longest, 1.0 / std::sqrt(double(D)));
    });
    const bool windows = 4096 < loom::kCudnnWindowMeanTokens * docs;
    CHECK(windows == (documents == 250));
    CHECK(use->per_document.load() == (windows ? 0 : 2));  // one call per head dim
    CHECK(use->windows.load() == (windows ? 2 : 0));
  }
}

// Documents of 1 token, 127, exactly 128 and 129 (around the kernel's 128-row tile), 300, 15, 324 and
// a last one of 76. GQA (8 query heads on 2 kv heads), two head dims.
TEST_CASE("cuDNN segment attention equals per-document attention forward and backward") {
  const std::vector<int32_t> cu{0, 1, 128, 256, 385, 685, 700, 1024, 1100};
  const torch::Tensor cu_t = torch::tensor(cu, torch::kInt32);
  check_per_document(cu, 8, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t D) {
    return loom::cudnn_segment_attention(q, k, v, cu_t, 1.0 / std::sqrt(double(D)));
  });
}

// Shapes the graphs round up to: five documents (a graph of eight, three of length 0), empty
// documents between others, whole packs of one document, and the longest document just past a
// power of two (a graph of 1024 for 513 tokens).
TEST_CASE("cuDNN attention over documents of every count and length equals per-document attention") {
  const std::vector<std::vector<int32_t>> cases{{0, 100, 228, 356, 484, 1024},
                                                {0, 0, 300, 300, 301, 700, 700},
                                                {0, 512, 1024, 1536, 2048},
                                                {0, 513, 600}};
  for (const auto& cu : cases) {
    INFO("cu_seqlens ending at " << cu.back() << " with " << cu.size() - 1 << " documents");
    const torch::Tensor cu_t = torch::tensor(cu, torch::kInt32);
    check_per_document(cu, 21, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t D) {
      return loom::cudnn_segment_attention(q, k, v, cu_t, 1.0 / std::sqrt(double(D)));
    });
  }
  // Whole packs of 512 with a run's seq_len of 512: the dense graph of four.
  const std::vector<int32_t> whole{0, 512, 1024, 1536, 2048};
  check_per_document(whole, 22, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t D) {
    return loom::cudnn_segment_attention(q, k, v, torch::tensor(whole, torch::kInt32), 1.0 / std::sqrt(double(D)), 512);
  });
}

// Short documents sharing windows kept apart by a bias, longer ones in a second call (cuda/
// cudnn_sdpa.h, sdpa_windows): documents of 1 token, exactly a window, one past it, empty ones and
// one cut at the end, then packs of 60 and 250 documents. Last, the calls a thread planned last:
// replanned for other documents of as many tokens, reused for the same ones.
TEST_CASE("cuDNN attention with short documents in windows equals per-document attention") {
  const std::vector<std::vector<int32_t>> cases{{0, 1, 17, 145, 146, 274, 275, 600, 600, 640},
                                                {0, 40, 80, 120, 121, 380, 400, 401, 529, 640},
                                                {0, 3, 10, 30, 31, 90, 128}};
  for (int64_t window : {128, 256}) {
    for (const auto& cu : cases) {
      INFO("windows of " << window << ", cu_seqlens ending at " << cu.back() << " with " << cu.size() - 1
                         << " documents");
      const torch::Tensor cu_t = torch::tensor(cu, torch::kInt32);
      check_per_document(cu, 31, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     int64_t D) {
        return loom::cudnn_segment_attention(q, k, v, cu_t, 1.0 / std::sqrt(double(D)), 0, window);
      });
    }
  }
  for (int64_t documents : {60, 250}) {
    INFO(documents << " documents, windows of 256");
    const std::vector<int32_t> cu = pack_of(documents, 4096, 80 + static_cast<uint64_t>(documents));
    const torch::Tensor cu_t = torch::tensor(cu, torch::kInt32);
    check_per_document(cu, 32, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t D) {
      return loom::cudnn_segment_attention(q, k, v, cu_t, 1.0 / std::sqrt(double(D)), 4096, 256);
    });
  }
  const torch::Tensor first = torch::tensor(cases[0], torch::kInt32), second = torch::tensor(cases[1], torch::kInt32);
  check_per_document(cases[1], 34, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       int64_t D) {
    const double scale = 1.0 / std::sqrt(double(D));
    {
      const torch::NoGradGuard no_grad;
      loom::cudnn_segment_attention(q, k, v, first, scale, 0, 128);
      loom::cudnn_segment_attention(q, k, v, second, scale, 0, 128);  // other documents: planned again
    }
    return loom::cudnn_segment_attention(q, k, v, second, scale, 0, 128);  // the same: reused
  });
  const std::vector<int32_t> half{0, 1, 20, 200, 230, 640};
  check_per_document(
      half, 33,
      [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t D) {
        return loom::cudnn_segment_attention(q, k, v, torch::tensor(half, torch::kInt32), 1.0 / std::sqrt(double(D)),
                                             0, 128);
      },
      torch::kHalf);
}

TEST_CASE("cuDNN attention in fp16 equals per-document attention forward and backward") {
  const std::vector<int32_t> cu{0, 1, 200, 640};
  const torch::Tensor cu_t = torch::tensor(cu, torch::kInt32);
  check_per_document(
      cu, 6,
      [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t D) {
        return loom::cudnn_segment_attention(q, k, v, cu_t, 1.0 / std::sqrt(double(D)));
      },
      torch::kHalf);
}

TEST_CASE("packed attention through cuDNN equals the masked path, with and without the batch's host copy") {
  loom::Batch b = loom::test::make_packed_batch({{100, 28, 3}, {64, 64, 100}}, 256, 1000, 11).to(cuda());
  REQUIRE(b.cu_seqlens_host.defined());  // Batch::to keeps the CPU copy
  REQUIRE(b.cu_seqlens_host.is_cpu());
  const int64_t B = 2, T = 256, H = 4, K = 2, D = 64;
  torch::manual_seed(13);
  const auto bf = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  const torch::Tensor q = torch::randn({B, T, H, D}, bf), k = torch::randn({B, T, K, D}, bf),
                      v = torch::randn({B, T, K, D}, bf);
  const loom::PackedContext ctx = loom::make_packed_context(b, D, 10000.0);
  const torch::Tensor masked = loom::masked_attention(q.to(torch::kFloat32), k.to(torch::kFloat32),
                                                      v.to(torch::kFloat32), ctx.mask);
  const loom::VarlenAttentionFn fn = kernel_of(loom::AttentionKernel::kCudnnSegments, H, K, D, T);
  const torch::Tensor real = (b.segments >= 0).unsqueeze(-1).unsqueeze(-1);  // padding differs by design
  const torch::Tensor with_host = loom::packed_attention(q, k, v, loom::make_packed_context(b, D, 10000.0, fn));
  CHECK(rel_err(with_host * real, masked * real) < 1e-2);
  b.cu_seqlens_host = torch::Tensor();  // a batch built on the device: the kernel reads cu_seqlens back
  const torch::Tensor without = loom::packed_attention(q, k, v, loom::make_packed_context(b, D, 10000.0, fn));
  CHECK(torch::equal(without, with_host));
}

TEST_CASE("cuDNN segment attention rejects cu_seqlens that do not cover the tokens") {
  const auto bf = torch::TensorOptions().device(cuda()).dtype(torch::kBFloat16);
  const torch::Tensor x = torch::randn({64, 2, 64}, bf);
  CHECK_THROWS_WITH(loom::cudnn_segment_attention(x, x, x, torch::tensor({0, 10, 60}, torch::kInt32), 1.0),
                    Catch::Contains("cu_seqlens runs from 0 to 60, expected 0 to 64"));
  CHECK_THROWS_WITH(loom::cudnn_segment_attention(x, x, x, torch::tensor({0, 40, 30, 64}, torch::kInt32), 1.0),
                    Catch::Contains("cu_seqlens decreases at entry 2: 40 then 30"));
  CHECK_THROWS_WITH(loom::cudnn_segment_attention(x, x, x, torch::tensor({0, 64}, torch::kInt32).to(cuda()), 1.0),
                    Catch::Contains("int32 on the CPU"));
}
