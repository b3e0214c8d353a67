#include "cpu_attention.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>

#include "loom/error.h"

namespace loom {
namespace {
#ifdef LOOM_HAVE_BLAS

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One query block: tokens [start + r0, start + r0 + rows) of the segment starting at `start`; its
// keys are the segment's tokens [start, start + r0 + rows). `probs` is where the block's
// probabilities for kv head 0 start in the flat buffer; head h's follow at h * rows * G * keys.
struct QueryBlock {
  int64_t start, r0, rows, probs;
  int64_t keys() const { return r0 + rows; }
};

// The blocks of every segment in order, and where each segment's blocks begin (S+1 entries).
struct BlockPlan {
  std::vector<QueryBlock> blocks;
  std::vector<size_t> segment_first;
  int64_t probs_numel = 0;  // floats of the probability buffer over all blocks and kv heads
};

BlockPlan plan_blocks(const torch::Tensor& cu_seqlens, int64_t tokens, int64_t K, int64_t G) {
  const torch::Tensor cu = cu_seqlens.to(torch::kCPU, torch::kInt64).contiguous();
  const int64_t* c = cu.data_ptr<int64_t>();
  const int64_t S = cu.numel() - 1;
  LOOM_CHECK(S >= 1 && c[0] == 0 && c[S] == tokens, "cu_seqlens must run from 0 to the ", tokens,
             " tokens of the micro-batch, got ", cu_seqlens.numel(), " entries from ", c[0], " to ", c[S]);
  BlockPlan plan;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = c[s + 1] - c[s];
    LOOM_CHECK(n >= 0, "cu_seqlens must not decrease (segment ", s, ": ", c[s], " -> ", c[s + 1], ")");
    plan.segment_first.push_back(plan.blocks.size());
    for (int64_t r0 = 0; r0 < n; r0 += kQueryBlock) {
      QueryBlock b{c[s], r0, std::min(kQueryBlock, n - r0), plan.probs_numel};
      plan.probs_numel += K * b.rows * G * b.keys();
      plan.blocks.push_back(b);
    }
  }
  plan.segment_first.push_back(plan.blocks.size());
  return plan;
}

// BLAS's Fortran sgemm (trainer/CMakeLists.txt links the libblas.so.3 that LibTorch itself uses).
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

// Row-major C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C through column-major BLAS (C^T =
// op(B)^T op(A)^T). Called straight, not through ATen: a block's arithmetic is a few microseconds
// and an ATen call's dispatch costs as much. Inside at::parallel_for, OpenBLAS runs single-threaded.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  sgemm_(trans_b ? "T" : "N", trans_a ? "T" : "N", &ni, &mi, &ki, &alpha, b, &lb, a, &la, &beta, c, &lc);
}

// Where one kv head's block lives in the kv-head-major layouts: q/out/dq [K, Tok, G, D] as rows of
// D, k/v [K, Tok, D], row sums [K, Tok, G], probabilities flat at QueryBlock::probs.
struct HeadBlock {
  int64_t q_row0;     // first query row (token start + r0, head g = 0) within head kh's [Tok * G, D]
  int64_t key_row0;   // first key row within head kh's [Tok, D]
  int64_t R, keys;    // rows * G query rows, keys
  int64_t r0, G;
  // Keys a query row sees: its own token and those before it in the segment.
  int64_t visible(int64_t row) const { return r0 + row / G + 1; }
};

// Softmax of each score row [R, keys] over its visible keys, in place; the future gets 0. A row
// sees at least its own token, so no row is empty. One ATen call per block for its vectorised exp
// (inside at::parallel_for it runs on the calling thread).
void causal_softmax(float* p, const HeadBlock& hb) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t row = 0; row < hb.R; ++row) {
    std::fill(p + row * hb.keys + hb.visible(row), p + (row + 1) * hb.keys, neg_inf);
  }
  torch::Tensor scores = torch::from_blob(p, {hb.R, hb.keys}, torch::TensorOptions().dtype(torch::kFloat32));
  at::_softmax_out(scores, scores, 1, false);  // row by row: in place is safe
}

// Runs fn(segment, kv head) for every pair, in parallel: the pairs write disjoint rows of every
// output (a segment's keys belong to it alone), so no order between them matters.
template <typename Fn>
void for_each_segment_head(const BlockPlan& plan, int64_t K, const Fn& fn) {
  const int64_t S = static_cast<int64_t>(plan.segment_first.size()) - 1;
  at::parallel_for(0, S * K, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i / K, i % K);
  });
}

HeadBlock head_block(const QueryBlock& b, int64_t G) {
  return {(b.start + b.r0) * G, b.start, b.rows * G, b.keys(), b.r0, G};
}

class SegmentAttention : public torch::autograd::Function<SegmentAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& cu_seqlens, double scale) {
    const int64_t Tok = q.size(0), H = q.size(1), D = q.size(2), K = k.size(1), G = H / K;
    // Kv-head-major layouts: a block's queries of one kv head are consecutive rows.
    const torch::Tensor qg = (q * scale).view({Tok, K, G, D}).permute({1, 0, 2, 3}).contiguous();  // [K, Tok, G, D]
    const torch::Tensor kt = k.permute({1, 0, 2}).contiguous();                                     // [K, Tok, D]
    const torch::Tensor vt = v.permute({1, 0, 2}).contiguous();
    torch::Tensor out = torch::empty({K, Tok, G, D}, q.options());
    const BlockPlan plan = plan_blocks(cu_seqlens, Tok, K, G);
    torch::Tensor probs = torch::empty({plan.probs_numel}, q.options());
    const float *qp = qg.data_ptr<float>(), *kp = kt.data_ptr<float>(), *vp = vt.data_ptr<float>();
    float *op = out.data_ptr<float>(), *pp = probs.data_ptr<float>();
    for_each_segment_head(plan, K, [&](int64_t s, int64_t kh) {
      for (size_t i = plan.segment_first[s]; i < plan.segment_first[s + 1]; ++i) {
        const QueryBlock& b = plan.blocks[i];
        const HeadBlock hb = head_block(b, G);
        float* p = pp + b.probs + kh * hb.R * hb.keys;
        const float* kk = kp + (kh * Tok + hb.key_row0) * D;
        gemm(false, true, hb.R, hb.keys, D, 1.0f, qp + (kh * Tok * G + hb.q_row0) * D, D, kk, D, 0.0f, p, hb.keys);
        causal_softmax(p, hb);
        gemm(false, false, hb.R, D, hb.keys, 1.0f, p, hb.keys, vp + (kh * Tok + hb.key_row0) * D, D, 0.0f,
             op + (kh * Tok * G + hb.q_row0) * D, D);
      }
    });
    ctx->save_for_backward({qg, kt, vt, out, probs, cu_seqlens});
    ctx->saved_data["scale"] = scale;
    return out.permute({1, 0, 2, 3}).reshape({Tok, H, D});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &qg = s[0], &kt = s[1], &vt = s[2], &out = s[3], &probs = s[4], &cu_seqlens = s[5];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t K = qg.size(0), Tok = qg.size(1), G = qg.size(2), D = qg.size(3);
    const torch::Tensor dout = grads[0].reshape({Tok, K, G, D}).permute({1, 0, 2, 3}).contiguous();
    // softmax backward: dS = P * (dP - rowsum(dO * O)), the row sums taken once for all blocks.
    const torch::Tensor row_dot = (dout * out).sum(-1).contiguous();  // [K, Tok, G]
    torch::Tensor dq = torch::empty_like(qg);
    torch::Tensor dk = torch::zeros_like(kt), dv = torch::zeros_like(vt);
    const BlockPlan plan = plan_blocks(cu_seqlens, Tok, K, G);
    LOOM_ASSERT(plan.probs_numel == probs.numel(), "segment attention saved ", probs.numel(),
                " probabilities, backward plans ", plan.probs_numel);
    const float *qp = qg.data_ptr<float>(), *kp = kt.data_ptr<float>(), *vp = vt.data_ptr<float>();
    const float *pp = probs.data_ptr<float>(), *dop = dout.data_ptr<float>(), *rdp = row_dot.data_ptr<float>();
    float *dqp = dq.data_ptr<float>(), *dkp = dk.data_ptr<float>(), *dvp = dv.data_ptr<float>();
    for_each_segment_head(plan, K, [&](int64_t seg, int64_t kh) {
      std::vector<float> ds;  // one block's dP, then dS, [R, keys]
      for (size_t i = plan.segment_first[seg]; i < plan.segment_first[seg + 1]; ++i) {
        const QueryBlock& b = plan.blocks[i];
        const HeadBlock hb = head_block(b, G);
        const float* p = pp + b.probs + kh * hb.R * hb.keys;
        const int64_t qoff = (kh * Tok * G + hb.q_row0) * D, koff = (kh * Tok + hb.key_row0) * D;
        const float* dob = dop + qoff;
        gemm(true, false, hb.keys, D, hb.R, 1.0f, p, hb.keys, dob, D, 1.0f, dvp + koff, D);  // dV += P^T dO
        ds.resize(static_cast<size_t>(hb.R * hb.keys));
        gemm(false, true, hb.R, hb.keys, D, 1.0f, dob, D, vp + koff, D, 0.0f, ds.data(), hb.keys);  // dP = dO V^T
        const float* rd = rdp + kh * Tok * G + hb.q_row0;
        for (int64_t row = 0; row < hb.R; ++row) {
          float* r = ds.data() + row * hb.keys;
          const float* pr = p + row * hb.keys;
          for (int64_t j = 0; j < hb.keys; ++j) r[j] = pr[j] * (r[j] - rd[row]);
        }
        gemm(false, false, hb.R, D, hb.keys, 1.0f, ds.data(), hb.keys, kp + koff, D, 0.0f, dqp + qoff, D);  // dQ = dS K
        gemm(true, false, hb.keys, D, hb.R, 1.0f, ds.data(), hb.keys, qp + qoff, D, 1.0f, dkp + koff, D);  // dK += dS^T Q
      }
    });
    // qg was q * scale: the chain rule puts the scale on dq.
    return {(dq * scale).permute({1, 0, 2, 3}).reshape({Tok, K * G, D}), dk.permute({1, 0, 2}).contiguous(),
            dv.permute({1, 0, 2}).contiguous(), {}, {}};
  }
};
#endif  // LOOM_HAVE_BLAS

}  // namespace

bool cpu_segment_attention_supported(const torch::Device& device, torch::Dtype dtype) {
#ifdef LOOM_HAVE_BLAS
  return device.is_cpu() && dtype == torch::kFloat32;
#else
  return false;  // built without a BLAS library to call
#endif
}

torch::Tensor cpu_segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& cu_seqlens, int64_t /*max_seqlen*/, double scale) {
  LOOM_CHECK(q.dim() == 3 && k.dim() == 3 && k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                 q.size(2) == k.size(2) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
             "segment attention needs q [Tok, H, D] and k, v [Tok, K, D] with H a multiple of K, got ", q.sizes(),
             ", ", k.sizes(), ", ", v.sizes());
  LOOM_CHECK(cpu_segment_attention_supported(q.device(), q.scalar_type()) && k.scalar_type() == q.scalar_type() &&
                 v.scalar_type() == q.scalar_type(),
             "segment attention runs on CPU float32, got ", q.device().str(), " ", q.scalar_type());
  LOOM_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.scalar_type() == torch::kInt32,
             "segment attention needs cu_seqlens [S+1] int32, got ", cu_seqlens.sizes(), " ", cu_seqlens.scalar_type());
#ifdef LOOM_HAVE_BLAS
  return SegmentAttention::apply(q, k, v, cu_seqlens, scale);
#else
  (void)scale;
  LOOM_FAIL("segment attention needs BLAS, and this loom-train was built without one (no libblas.so.3 found)");
#endif
}

}  // namespace loom
