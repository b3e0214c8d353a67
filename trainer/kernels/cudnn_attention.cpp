#include "cudnn_attention.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "fused_ops.h"
#include "loom/error.h"
#include "torch_compat.h"

#ifdef LOOM_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#endif

// The dense cuDNN SDPA entry with a cached graph and a scale argument: LibTorch >= 2.5, CUDA builds.
#if defined(LOOM_CUDA_KERNELS) && LOOM_TORCH2 && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5)
#define LOOM_CUDNN_SDPA 1
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#else
#define LOOM_CUDNN_SDPA 0
#endif

namespace loom {
namespace {

#if LOOM_CUDNN_SDPA
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One cuDNN call: `batch` segments of exactly `padded` tokens each, back to back from `start` (batch
// > 1 only for segments that fill their tiles, as whole one-document packs do), or one segment of
// `len` tokens padded to `padded`.
struct Segment {
  int64_t start, len, padded, batch;
  int64_t tokens() const { return batch * len; }
};

std::vector<Segment> plan_segments(const torch::Tensor& cu_host, int64_t tokens, int64_t batch_len) {
  LOOM_CHECK(cu_host.device().is_cpu() && cu_host.dim() == 1 && cu_host.scalar_type() == torch::kInt32 &&
                 cu_host.numel() >= 2,
             "cuDNN segment attention needs cu_seqlens [S+1] int32 on the CPU, got ", cu_host.sizes(), " ",
             cu_host.scalar_type(), " on ", cu_host.device().str());
  const torch::Tensor cu = cu_host.contiguous();
  const int32_t* c = cu.data_ptr<int32_t>();
  const int64_t S = cu.numel() - 1;
  LOOM_CHECK(c[0] == 0 && c[S] == tokens, "cu_seqlens runs from ", c[0], " to ", c[S], ", expected 0 to ", tokens);
  std::vector<Segment> segs;
  segs.reserve(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = c[s + 1] - c[s];
    LOOM_CHECK(n >= 0, "cu_seqlens decreases at entry ", s + 1, ": ", c[s], " then ", c[s + 1]);
    if (n <= 0) continue;
    const int64_t padded = (n + kSegmentGrain - 1) / kSegmentGrain * kSegmentGrain;
    // A segment of batch_len tokens (whole tiles) right after another joins it as one more batch
    // row: one launch instead of several, and its rows need no padding.
    if (n == batch_len && n == padded && !segs.empty()) {
      Segment& last = segs.back();
      if (last.len == n && last.padded == n && last.start + last.tokens() == c[s]) {
        ++last.batch;
        continue;
      }
    }
    segs.push_back({c[s], n, padded, 1});
  }
  return segs;
}

// Whether the one call covers every token without padding: its results are then the whole
// outputs, used as they come, with no rows to copy into place.
bool covers_all(const std::vector<Segment>& segs, int64_t tokens) {
  return segs.size() == 1 && segs[0].start == 0 && segs[0].len == segs[0].padded && segs[0].tokens() == tokens;
}

// Rows [start, start + padded) of a contiguous [Tok, N, D] tensor as [1, N, padded, D]: a view where
// the rows exist, else the segment's rows zero-padded into a copy (same strides, so the same graph).
// A batch of whole segments: [batch, N, padded, D], a view.
torch::Tensor padded_rows(const torch::Tensor& x, const Segment& s) {
  if (s.batch > 1)
    return x.narrow(0, s.start, s.tokens()).view({s.batch, s.padded, x.size(1), x.size(2)}).transpose(1, 2);
  const torch::Tensor rows =
      s.start + s.padded <= x.size(0)
          ? x.narrow(0, s.start, s.padded)
          : torch::constant_pad_nd(x.narrow(0, s.start, s.len), {0, 0, 0, 0, 0, s.padded - s.len});
  return rows.unsqueeze(0).transpose(1, 2);
}

// The output gradient of a segment as [1, N, P, D], zero past its n rows: the rows themselves when
// the segment fills its tiles, else a copy with the tail zeroed.
torch::Tensor padded_grad(const torch::Tensor& g, const Segment& s) {
  if (s.len == s.padded) return padded_rows(g, s);
  torch::Tensor p = torch::empty({s.padded, g.size(1), g.size(2)}, g.options());
  copy_token_rows(g.narrow(0, s.start, s.len), p.narrow(0, 0, s.len));
  p.narrow(0, s.len, s.padded - s.len).zero_();
  return p.unsqueeze(0).transpose(1, 2);
}

// The segments' rows of a [batch, N, P, D] result as [tokens, N, D]: a view where cuDNN laid the
// result out token-major, as it does for inputs that are (its output takes its query's layout).
torch::Tensor first_rows(const torch::Tensor& x, const Segment& s) {
  if (s.batch > 1) return x.transpose(1, 2).reshape({s.tokens(), x.size(1), x.size(3)});
  return x.select(0, 0).transpose(0, 1).narrow(0, 0, s.len);
}

// The segments' kernels run on kStreams streams, longest first, round-robin: a short segment's grid
// (heads x query tiles) fills few of the SMs, and another segment's kernel fills the rest. The
// streams come from the high-priority pool, apart from the low-priority side streams of the batch
// transfer and the optimizer, and are taken once per device.
//
// The backward recomputes the forward's assignment from the same cu_seqlens, so each segment's
// saved statistics are made, read and freed on one stream: the allocator's stream-ordered reuse
// covers them without cross-stream bookkeeping (recordStream events, polled on every allocation).
// What a segment writes into tensors made on the main stream before the fan-out, and reads from
// them, is ordered by the fan-out's events.
constexpr size_t kStreams = 3;

class Fanout {
 public:
  Fanout() : main_(c10::cuda::getCurrentCUDAStream()) {
    static std::mutex mu;
    static std::vector<std::vector<c10::cuda::CUDAStream>> pool;
    {
      std::lock_guard<std::mutex> lock(mu);
      const size_t d = static_cast<size_t>(main_.device_index());
      if (pool.size() <= d) pool.resize(d + 1);
      while (pool[d].size() < kStreams)
        pool[d].push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, main_.device_index()));
      streams_ = pool[d];
    }
    at::cuda::CUDAEvent ready;
    ready.record(main_);
    for (const auto& s : streams_) ready.block(s);
  }
  Fanout(const Fanout&) = delete;
  Fanout& operator=(const Fanout&) = delete;

  // Runs fn(i) for every i of order, the j-th on stream j mod kStreams, then makes the main stream
  // wait for all of them.
  template <typename Fn>
  void run(const std::vector<size_t>& order, Fn&& fn) {
    for (size_t j = 0; j < order.size(); ++j) {
      c10::cuda::CUDAStreamGuard guard(streams_[j % streams_.size()]);
      fn(order[j]);
    }
    for (const auto& s : streams_) {
      at::cuda::CUDAEvent done;
      done.record(s);
      done.block(main_);
    }
  }

 private:
  c10::cuda::CUDAStream main_;
  std::vector<c10::cuda::CUDAStream> streams_;
};

std::vector<size_t> longest_first(const std::vector<Segment>& segs) {
  std::vector<size_t> order(segs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return segs[a].tokens() > segs[b].tokens(); });
  return order;
}

// Runs fn(i) for every segment: one call on the caller's stream, several across the fan-out's.
template <typename Fn>
void run_segments(const std::vector<Segment>& segs, Fn&& fn) {
  if (segs.size() == 1) {
    fn(size_t{0});
    return;
  }
  Fanout streams;
  streams.run(longest_first(segs), fn);
}

// Dropout 0, causal within every segment. Saved per call: the log-sum-exp [batch, H, P, 1] and the
// kernel's philox seed/offset (unused without dropout, but part of the backward's signature). The
// output itself is saved whole and re-viewed per segment in the backward. When one call covers
// every token (packs of one document each), its results are the outputs and gradients as they are.
class CudnnSegments : public torch::autograd::Function<CudnnSegments> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& cu_host, double scale, int64_t batch_len) {
    const std::vector<Segment> segs = plan_segments(cu_host, q.size(0), batch_len);
    const bool whole = covers_all(segs, q.size(0));
    std::vector<torch::Tensor> stats(3 * segs.size());
    // Each segment's rows are copied into place on its own stream by a kernel (a cat would stage its
    // list of pointers through a pageable copy that waits for the stream, and ATen's copy_ is a
    // cudaMemcpyAsync: both held the host up every layer).
    torch::Tensor out = whole ? torch::Tensor() : torch::empty_like(q);
    run_segments(segs, [&](size_t i) {
      const Segment& s = segs[i];
      auto r = at::_cudnn_attention_forward(padded_rows(q, s), padded_rows(k, s), padded_rows(v, s),
                                            /*attn_bias=*/std::nullopt, /*cum_seq_q=*/std::nullopt,
                                            /*cum_seq_k=*/std::nullopt, s.padded, s.padded,
                                            /*compute_log_sumexp=*/true, /*dropout_p=*/0.0, /*is_causal=*/true,
                                            /*return_debug_mask=*/false, scale);
      if (whole) {
        out = first_rows(std::get<0>(r), s).contiguous();
      } else {
        copy_token_rows(first_rows(std::get<0>(r), s), out.narrow(0, s.start, s.tokens()));
      }
      stats[3 * i] = std::get<1>(r);
      stats[3 * i + 1] = std::get<6>(r);
      stats[3 * i + 2] = std::get<7>(r);
    });
    variable_list saved{q, k, v, out, cu_host};
    saved.insert(saved.end(), stats.begin(), stats.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["batch_len"] = batch_len;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &q = s[0], &k = s[1], &v = s[2], &out = s[3];
    const double scale = ctx->saved_data["scale"].toDouble();
    const std::vector<Segment> segs = plan_segments(s[4], q.size(0), ctx->saved_data["batch_len"].toInt());
    const bool whole = covers_all(segs, q.size(0));
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor dq, dk, dv;
    if (!whole) {
      dq = torch::empty_like(q);
      dk = torch::empty_like(k);
      dv = torch::empty_like(v);
    }
    run_segments(segs, [&](size_t i) {
      const Segment& seg = segs[i];
      // The rows past the segment get a zero output gradient: they then touch no key or value of it.
      // The forward's output is read through the same padded views: only the rows with a gradient
      // count.
      auto r = at::_cudnn_attention_backward(padded_grad(g, seg), padded_rows(q, seg), padded_rows(k, seg),
                                             padded_rows(v, seg), padded_rows(out, seg), s[5 + 3 * i], s[6 + 3 * i],
                                             s[7 + 3 * i],
                                             /*attn_bias=*/torch::Tensor(), /*cum_seq_q=*/torch::Tensor(),
                                             /*cum_seq_k=*/torch::Tensor(), seg.padded, seg.padded,
                                             /*dropout_p=*/0.0, /*is_causal=*/true, scale);
      if (whole) {
        dq = first_rows(std::get<0>(r), seg).contiguous();
        dk = first_rows(std::get<1>(r), seg).contiguous();
        dv = first_rows(std::get<2>(r), seg).contiguous();
        return;
      }
      copy_token_rows(first_rows(std::get<0>(r), seg), dq.narrow(0, seg.start, seg.tokens()));
      copy_token_rows(first_rows(std::get<1>(r), seg), dk.narrow(0, seg.start, seg.tokens()));
      copy_token_rows(first_rows(std::get<2>(r), seg), dv.narrow(0, seg.start, seg.tokens()));
    });
    return {dq, dk, dv, {}, {}, {}};
  }
};
#endif

}  // namespace

torch::Tensor cudnn_segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens_host, double scale, int64_t batch_len) {
  LOOM_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                 q.size(2) == k.size(2) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
             "cuDNN segment attention needs q [Tok, H, D] and k, v [Tok, K, D] with H a multiple of K, got ",
             q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  LOOM_CHECK(batch_len >= 0 && batch_len % kSegmentGrain == 0, "cuDNN segment attention batches segments of a ",
             "multiple of ", kSegmentGrain, " tokens, not ", batch_len);
#if LOOM_CUDNN_SDPA
  // The views assume rows of H*D (K*D) contiguous elements; views from a fused QKV may not have them.
  return CudnnSegments::apply(q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens_host, scale, batch_len);
#else
  (void)cu_seqlens_host;
  (void)scale;
  LOOM_FAIL("cuDNN segment attention needs a CUDA build against LibTorch >= 2.5 (this build: LibTorch ",
            TORCH_VERSION, ")");
#endif
}

bool cudnn_attention_supported(const torch::Device& device, torch::Dtype dtype, int64_t head_dim, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (!LOOM_CUDNN_SDPA) {
    return no(str("this build has no cuDNN attention (it needs a CUDA build against LibTorch >= 2.5; LibTorch ",
                  TORCH_VERSION, ")"));
  }
  if (!device.is_cuda()) return no("the device is " + device.str() + ", not CUDA");
  if (dtype != torch::kBFloat16 && dtype != torch::kFloat16) {
    return no(str("activations are ", c10::toString(dtype), ", cuDNN attention takes bf16 or fp16"));
  }
  if (head_dim % 8 != 0 || head_dim > kCudnnMaxHeadDim)
    return no(str("head dim ", head_dim, " is not a multiple of 8 up to ", kCudnnMaxHeadDim));
  // cuDNN's presence and the GPU's support are only known by trying: forward and backward.
  try {
    const auto opt = torch::TensorOptions().device(device).dtype(dtype);
    const torch::Tensor x = torch::ones({kSegmentGrain + 3, 2, head_dim}, opt).requires_grad_();
    const int32_t end = static_cast<int32_t>(kSegmentGrain + 3);
    const torch::Tensor cu = torch::tensor({0, 3, end}, torch::dtype(torch::kInt32));
    cudnn_segment_attention(x, x, x, cu, 1.0).sum().backward();
  } catch (const std::exception& e) {
    return no(std::string("the kernel failed on a probe: ") + e.what());
  }
  return true;
}

bool cudnn_attention_preferred(const torch::Device& device) {
#ifdef LOOM_CUDA_KERNELS
  if (!device.is_cuda()) return false;
  const int index = device.has_index() ? device.index() : at::cuda::current_device();
  return at::cuda::getDeviceProperties(index)->major == 9;
#else
  (void)device;
  return false;
#endif
}

namespace {

// One segment of every padded length, and batches of 2..max_batch whole segments of the longest,
// forward (on this thread) and, with grad, backward (on the autograd engine's thread).
void run_every_length(const torch::TensorOptions& opt, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      int64_t seq_len, int64_t max_batch, bool backward) {
  const int64_t longest = (seq_len + kSegmentGrain - 1) / kSegmentGrain * kSegmentGrain;
  // Only segments that fill their tiles are batched: whole packs when seq_len is a multiple of the grain.
  const int64_t batches = longest == seq_len ? std::max<int64_t>(max_batch, 1) : 1;
  const torch::Tensor q = torch::zeros({batches * longest, heads, head_dim}, opt).requires_grad_(backward);
  const torch::Tensor kv = torch::zeros({batches * longest, kv_heads, head_dim}, opt).requires_grad_(backward);
  auto run = [&](const std::vector<int32_t>& cu) {
    const int64_t tokens = cu.back();
    const torch::Tensor rows = kv.narrow(0, 0, tokens);
    const torch::Tensor cu_t = torch::tensor(cu, torch::dtype(torch::kInt32));
    const torch::Tensor out =
        cudnn_segment_attention(q.narrow(0, 0, tokens), rows, rows, cu_t, 1.0, batches > 1 ? longest : 0);
    if (backward) out.sum().backward();
  };
  for (int64_t p = kSegmentGrain; p <= longest; p += kSegmentGrain) run({0, static_cast<int32_t>(p)});
  for (int64_t b = 2; b <= batches; ++b) {
    std::vector<int32_t> cu(static_cast<size_t>(b) + 1);
    for (int64_t i = 0; i <= b; ++i) cu[static_cast<size_t>(i)] = static_cast<int32_t>(i * longest);
    run(cu);
  }
}

// Its backward runs the forwards on the autograd engine's thread, where a checkpointed layer's
// forward is recomputed.
class ForwardOnBackwardThread : public torch::autograd::Function<ForwardOnBackwardThread> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t heads,
                               int64_t kv_heads, int64_t head_dim, int64_t seq_len, int64_t max_batch) {
    ctx->saved_data["shape"] = std::vector<int64_t>{heads, kv_heads, head_dim, seq_len, max_batch};
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::vector<int64_t> s = ctx->saved_data["shape"].toIntVector();
    torch::NoGradGuard no_grad;
    run_every_length(grads[0].options(), s[0], s[1], s[2], s[3], s[4], /*backward=*/false);
    return {grads[0], {}, {}, {}, {}, {}};
  }
};

}  // namespace

void warm_cudnn_attention(const torch::Device& device, torch::Dtype dtype, int64_t heads, int64_t kv_heads,
                          int64_t head_dim, int64_t seq_len, int64_t max_batch, bool recompute) {
  const auto opt = torch::TensorOptions().device(device).dtype(dtype);
  run_every_length(opt, heads, kv_heads, head_dim, seq_len, max_batch, /*backward=*/true);
  if (!recompute) return;
  const torch::Tensor x = torch::zeros({1}, opt).requires_grad_();
  ForwardOnBackwardThread::apply(x, heads, kv_heads, head_dim, seq_len, max_batch).sum().backward();
}

}  // namespace loom
