#include "cudnn_attention.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "torch_compat.h"

#ifdef LOOM_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "cuda/cudnn_sdpa.h"
#define LOOM_CUDNN_SDPA 1
#else
#define LOOM_CUDNN_SDPA 0
#endif

namespace loom {
namespace {

// Set while the probe or the warm-up runs: the graphs they build are expected (logged at debug), the
// ones built later are news.
std::atomic<bool> warming{false};

struct ExpectedBuilds {
  ExpectedBuilds() { warming = true; }
  ~ExpectedBuilds() { warming = false; }
  ExpectedBuilds(const ExpectedBuilds&) = delete;
  ExpectedBuilds& operator=(const ExpectedBuilds&) = delete;
};

int64_t pow2_at_least(int64_t x, int64_t floor) {
  int64_t p = floor;
  while (p < x) p *= 2;
  return p;
}

#if LOOM_CUDNN_SDPA
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The documents of cu_seqlens, checked: how many, the longest, and whether all have its length.
struct Documents {
  int64_t count = 0, longest = 0;
  bool equal = true;
};

Documents read_documents(const torch::Tensor& cu_host, int64_t tokens) {
  LOOM_CHECK(cu_host.device().is_cpu() && cu_host.dim() == 1 && cu_host.scalar_type() == torch::kInt32 &&
                 cu_host.numel() >= 2,
             "cuDNN attention needs cu_seqlens [S+1] int32 on the CPU, got ", cu_host.sizes(), " ",
             cu_host.scalar_type(), " on ", cu_host.device().str());
  const int32_t* c = cu_host.data_ptr<int32_t>();
  const int64_t S = cu_host.numel() - 1;
  LOOM_CHECK(c[0] == 0 && c[S] == tokens, "cu_seqlens runs from ", c[0], " to ", c[S], ", expected 0 to ", tokens);
  Documents d{S, 0};
  for (int64_t s = 0; s < S; ++s) {
    LOOM_CHECK(c[s + 1] >= c[s], "cu_seqlens decreases at entry ", s + 1, ": ", c[s], " then ", c[s + 1]);
    d.longest = std::max<int64_t>(d.longest, c[s + 1] - c[s]);
    d.equal = d.equal && c[s + 1] - c[s] == c[1] - c[0];
  }
  return d;
}

// Whole packs of one document each (max_seq tokens, every one) take the dense graph of exactly that
// many; other calls the ragged graph their counts round up to.
cuda::SdpaShape shape_of(const Documents& d, int64_t max_seq, const torch::Tensor& q, const torch::Tensor& k) {
  const bool half = q.scalar_type() == torch::kHalf;
  if (d.equal && max_seq > 0 && d.longest == max_seq)
    return {d.count, max_seq, q.size(1), k.size(1), q.size(2), half, /*ragged=*/false, /*bias=*/false};
  return {pow2_at_least(d.count, 1), pow2_at_least(std::max(d.longest, max_seq), kCudnnMinSeq), q.size(1), k.size(1),
          q.size(2), half, /*ragged=*/true, /*bias=*/false};
}

// A call's layout on the device: the words upload_layout copied there, or none for a dense graph.
cuda::SdpaLayout layout_of(const torch::Tensor& words, const cuda::SdpaShape& shape, int64_t tokens) {
  if (!shape.ragged) {
    cuda::SdpaLayout l;
    l.tokens = tokens;
    return l;
  }
  return cuda::sdpa_layout(words.data_ptr<int64_t>(), shape, tokens);
}

// This thread's graph of a pass and shape on the current device, built the first time it is asked for.
cuda::SdpaGraph& graph_of(cuda::SdpaGraph::Pass pass, const cuda::SdpaShape& shape) {
  struct Entry {
    int device;
    std::unique_ptr<cuda::SdpaGraph> graph;
  };
  // Never destroyed: at exit cuDNN may be unloaded before a thread's storage is torn down.
  thread_local auto& graphs = *new std::vector<Entry>();
  const int device = at::cuda::current_device();
  for (Entry& e : graphs)
    if (e.device == device && e.graph->pass() == pass && e.graph->shape() == shape) return *e.graph;
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<cuda::SdpaGraph> g;
  try {
    g = std::make_unique<cuda::SdpaGraph>(pass, shape);
  } catch (const std::runtime_error& e) {
    LOOM_FAIL("cuDNN attention: no graph for ", shape.batch, " documents of up to ", shape.max_seq, " tokens, ",
              shape.heads, "/", shape.kv_heads, " heads of ", shape.head_dim, ": ", e.what());
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  const std::string what = str("attention: cuDNN ", pass == cuda::SdpaGraph::Pass::kForward ? "forward" : "backward",
                               " graph for ", shape.ragged ? "up to " : "", shape.batch, " documents of ",
                               shape.ragged ? "up to " : "", shape.max_seq, " tokens built in ",
                               format_number(took.count(), 3), " s");
  if (warming) {
    log::debug(what);
  } else {
    log::info(what);
  }
  graphs.push_back({device, std::move(g)});
  return *graphs.back().graph;
}

// The call's layout (offsets and lengths) on q's device: one pinned host-to-device copy.
torch::Tensor upload_layout(const torch::Tensor& cu_host, const Documents& d, const cuda::SdpaShape& shape,
                            const torch::Device& device) {
  torch::Tensor host = torch::empty({cuda::sdpa_layout_words(shape.batch)},
                                   torch::TensorOptions().dtype(torch::kLong).pinned_memory(true));
  cuda::fill_sdpa_layout(cu_host.data_ptr<int32_t>(), d.count, shape, host.data_ptr<int64_t>());
  return host.to(torch::TensorOptions().device(device), /*non_blocking=*/true);
}

torch::Tensor workspace(const cuda::SdpaGraph& g, int64_t tokens, const torch::Device& device) {
  const int64_t bytes = static_cast<int64_t>(g.workspace_bytes(tokens));
  return torch::empty({std::max<int64_t>(bytes, 16)}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
}

void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }

// Dropout 0, causal within every document. Saved: q, k, v, the output, the log-sum-exp [Tok, H]
// fp32 and the call's layout on the device.
class CudnnAttention : public torch::autograd::Function<CudnnAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& cu_host, double scale, int64_t max_seq) {
    const c10::cuda::CUDAGuard guard(q.device());
    const int64_t tokens = q.size(0);
    const Documents d = read_documents(cu_host, tokens);
    const cuda::SdpaShape shape = shape_of(d, max_seq, q, k);
    const torch::Tensor layout = shape.ragged ? upload_layout(cu_host, d, shape, q.device()) : torch::Tensor();
    torch::Tensor out = torch::empty_like(q);
    torch::Tensor stats = torch::empty({tokens, q.size(1)}, q.options().dtype(torch::kFloat32));
    cuda::SdpaGraph& g = graph_of(cuda::SdpaGraph::Pass::kForward, shape);
    const torch::Tensor ws = workspace(g, tokens, q.device());
    const char* err = g.forward(layout_of(layout, shape, tokens), q.data_ptr(),
                                k.data_ptr(), v.data_ptr(), out.data_ptr(), stats.data_ptr<float>(),
                                static_cast<float>(scale), ws.data_ptr(), stream());
    LOOM_CHECK(err == nullptr, "cuDNN attention forward: ", err);
    ctx->save_for_backward({q, k, v, out, stats, layout});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["batch"] = shape.batch;
    ctx->saved_data["max_seq"] = shape.max_seq;
    ctx->saved_data["ragged"] = shape.ragged;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &q = s[0], &k = s[1], &v = s[2], &out = s[3], &stats = s[4], &layout = s[5];
    const c10::cuda::CUDAGuard guard(q.device());
    const cuda::SdpaShape shape{ctx->saved_data["batch"].toInt(), ctx->saved_data["max_seq"].toInt(), q.size(1),
                                k.size(1), q.size(2), q.scalar_type() == torch::kHalf,
                                ctx->saved_data["ragged"].toBool(), /*bias=*/false};
    const int64_t tokens = q.size(0);
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
    cuda::SdpaGraph& graph = graph_of(cuda::SdpaGraph::Pass::kBackward, shape);
    const torch::Tensor ws = workspace(graph, tokens, q.device());
    const char* err = graph.backward(layout_of(layout, shape, tokens), q.data_ptr(),
                                     k.data_ptr(), v.data_ptr(), out.data_ptr(), g.data_ptr(),
                                     stats.data_ptr<float>(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                                     static_cast<float>(ctx->saved_data["scale"].toDouble()), ws.data_ptr(),
                                     stream());
    LOOM_CHECK(err == nullptr, "cuDNN attention backward: ", err);
    return {dq, dk, dv, {}, {}, {}};
  }
};
#endif

}  // namespace

torch::Tensor cudnn_segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens_host, double scale, int64_t max_seq) {
  LOOM_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                 q.size(2) == k.size(2) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
             "cuDNN attention needs q [Tok, H, D] and k, v [Tok, K, D] with H a multiple of K, got ", q.sizes(),
             ", ", k.sizes(), ", ", v.sizes());
  LOOM_CHECK((q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf) &&
                 k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
             "cuDNN attention takes q, k and v all bf16 or all fp16, got ", q.scalar_type(), ", ", k.scalar_type(),
             ", ", v.scalar_type());
#if LOOM_CUDNN_SDPA
  LOOM_CHECK(q.is_cuda() && k.device() == q.device() && v.device() == q.device(),
             "cuDNN attention needs q, k and v on one CUDA device, got ", q.device().str(), ", ", k.device().str(),
             ", ", v.device().str());
  LOOM_CHECK(q.size(2) % 8 == 0 && q.size(2) <= kCudnnMaxHeadDim, "cuDNN attention takes head dims that are ",
             "multiples of 8 up to ", kCudnnMaxHeadDim, ", got ", q.size(2));
  // The graphs read rows of H*D (K*D) contiguous elements; views from a fused QKV may not have them.
  return CudnnAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens_host.contiguous(), scale,
                               max_seq);
#else
  (void)cu_seqlens_host;
  (void)scale;
  (void)max_seq;
  LOOM_FAIL("cuDNN attention needs a CUDA build (this build: LibTorch ", TORCH_VERSION,
            " without loom's CUDA kernels)");
#endif
}

bool cudnn_attention_supported(const torch::Device& device, torch::Dtype dtype, int64_t head_dim, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (!LOOM_CUDNN_SDPA) {
    return no(str("this build has no cuDNN attention (it needs a CUDA build; LibTorch ", TORCH_VERSION, ")"));
  }
  if (!device.is_cuda()) return no("the device is " + device.str() + ", not CUDA");
  if (dtype != torch::kBFloat16 && dtype != torch::kFloat16) {
    return no(str("activations are ", c10::toString(dtype), ", cuDNN attention takes bf16 or fp16"));
  }
  if (head_dim % 8 != 0 || head_dim > kCudnnMaxHeadDim)
    return no(str("head dim ", head_dim, " is not a multiple of 8 up to ", kCudnnMaxHeadDim));
  // cuDNN's presence and the GPU's support are only known by trying: forward and backward.
  const ExpectedBuilds expected;
  try {
    const auto opt = torch::TensorOptions().device(device).dtype(dtype);
    const torch::Tensor x = torch::ones({131, 2, head_dim}, opt).requires_grad_();
    const torch::Tensor cu = torch::tensor({0, 3, 131}, torch::dtype(torch::kInt32));
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

// A micro-batch of `tokens` tokens in `documents` documents of nearly equal length (the first one
// token short, so never whole packs, unless `whole`), the graphs built for max_seq: the forward on
// this thread and, with grad, the backward on the autograd engine's.
void run_documents(const torch::TensorOptions& opt, int64_t heads, int64_t kv_heads, int64_t head_dim,
                   int64_t max_seq, int64_t tokens, int64_t documents, bool whole, bool backward) {
  const torch::Tensor q = torch::zeros({tokens, heads, head_dim}, opt).requires_grad_(backward);
  const torch::Tensor kv = torch::zeros({tokens, kv_heads, head_dim}, opt).requires_grad_(backward);
  std::vector<int32_t> cu(static_cast<size_t>(documents) + 1);
  for (int64_t i = 0; i <= documents; ++i) cu[static_cast<size_t>(i)] = static_cast<int32_t>(i * tokens / documents);
  if (!whole) cu[1] -= 1;
  const torch::Tensor out =
      cudnn_segment_attention(q, kv, kv, torch::tensor(cu, torch::dtype(torch::kInt32)), 1.0, max_seq);
  if (backward) out.sum().backward();
}

// The dense graph of whole packs (tokens / max_seq documents of max_seq tokens), then the ragged ones
// of every power of two up to `most` that a micro-batch that is not whole packs rounds up to: it
// holds more documents than packs (padding is a document of its own), so the smallest is the first
// power of two above tokens / max_seq.
void run_every_count(const torch::TensorOptions& opt, const std::vector<int64_t>& s, bool backward) {
  const int64_t max_seq = s[3], tokens = s[4];
  if (tokens % max_seq == 0) run_documents(opt, s[0], s[1], s[2], max_seq, tokens, tokens / max_seq, true, backward);
  for (int64_t documents = pow2_at_least(tokens / max_seq + 1, 2); documents <= s[5] && documents <= tokens;
       documents *= 2)
    run_documents(opt, s[0], s[1], s[2], max_seq, tokens, documents, false, backward);
}

// Its backward runs the forwards on the autograd engine's thread, where a checkpointed layer's
// forward is recomputed.
class ForwardOnBackwardThread : public torch::autograd::Function<ForwardOnBackwardThread> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const std::vector<int64_t>& shape) {
    ctx->saved_data["shape"] = shape;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::NoGradGuard no_grad;
    run_every_count(grads[0].options(), ctx->saved_data["shape"].toIntVector(), /*backward=*/false);
    return {grads[0], {}};
  }
};

}  // namespace

int64_t warm_cudnn_attention(const torch::Device& device, torch::Dtype dtype, int64_t heads, int64_t kv_heads,
                             int64_t head_dim, int64_t seq_len, int64_t tokens, int64_t max_documents,
                             bool recompute) {
  const auto opt = torch::TensorOptions().device(device).dtype(dtype);
  // The graph a call of up to max_documents documents rounds up to.
  const int64_t most = pow2_at_least(std::min(max_documents, tokens), 1);
  const std::vector<int64_t> shape{heads, kv_heads, head_dim, seq_len, tokens, most};
  const ExpectedBuilds expected;
  run_every_count(opt, shape, /*backward=*/true);
  if (recompute) {
    const torch::Tensor x = torch::zeros({1}, opt).requires_grad_();
    ForwardOnBackwardThread::apply(x, shape).sum().backward();
  }
  return most;
}

}  // namespace loom
