#include "cudnn_attention.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
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

// One cuDNN call of a micro-batch: its graph's shape, its layout on the device (none for a dense
// graph) and, for windows of short documents, the bias that keeps their documents apart.
struct Call {
  cuda::SdpaShape shape;
  torch::Tensor layout, bias;
};

cuda::SdpaShape base_shape(const torch::Tensor& q, const torch::Tensor& k) {
  return {0, 0, q.size(1), k.size(1), q.size(2), q.scalar_type() == torch::kHalf, /*ragged=*/true, /*bias=*/false};
}

// Shapes travel through autograd's saved data and the warm-up as 8 integers each.
void push_shape(std::vector<int64_t>& out, const cuda::SdpaShape& s) {
  out.insert(out.end(), {s.batch, s.max_seq, s.heads, s.kv_heads, s.head_dim, s.fp16, s.ragged, s.bias});
}

cuda::SdpaShape shape_at(const std::vector<int64_t>& v, size_t i) {
  return {v[i], v[i + 1], v[i + 2], v[i + 3], v[i + 4], v[i + 5] != 0, v[i + 6] != 0, v[i + 7] != 0};
}

// A call's layout on the device, or none for a dense graph; the bias's address with it.
cuda::SdpaLayout layout_of(const Call& c, int64_t tokens) {
  cuda::SdpaLayout l;
  if (c.shape.ragged) l = cuda::sdpa_layout(c.layout.data_ptr<int64_t>(), c.shape, tokens);
  l.tokens = tokens;
  if (c.bias.defined()) l.bias = c.bias.data_ptr();
  return l;
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

// A host tensor's copy on `device`: one pinned host-to-device copy on the current stream.
torch::Tensor upload(const torch::Tensor& pinned, const torch::Device& device) {
  return pinned.to(torch::TensorOptions().device(device), /*non_blocking=*/true);
}

torch::Tensor pinned(int64_t n, torch::Dtype dtype) {
  return torch::empty({n}, torch::TensorOptions().dtype(dtype).pinned_memory(true));
}

Call sequences_call(const cuda::SdpaShape& shape, const std::vector<int32_t>& start, const std::vector<int32_t>& length,
                    int64_t tokens, const torch::Device& device) {
  torch::Tensor words = pinned(cuda::sdpa_layout_words(shape.batch), torch::kLong);
  cuda::fill_sdpa_layout(start.data(), length.data(), static_cast<int64_t>(start.size()), tokens, shape,
                         words.data_ptr<int64_t>());
  return {shape, upload(words, device), {}};
}

// The calls of a micro-batch. Whole packs of one document each (max_seq tokens, every one): the
// dense graph of exactly that many. Else, without windows, every document a sequence of the ragged
// graph its counts round up to. With windows, short documents share windows (one biased call) and
// longer ones are sequences of a second call.
std::vector<Call> plan_calls(const torch::Tensor& cu_host, const Documents& d, int64_t max_seq, int64_t window,
                             const torch::Tensor& q, const torch::Tensor& k) {
  const int32_t* cu = cu_host.data_ptr<int32_t>();
  const int64_t tokens = q.size(0);
  cuda::SdpaShape s = base_shape(q, k);
  if (d.equal && max_seq > 0 && d.longest == max_seq) {
    s.batch = d.count;
    s.max_seq = max_seq;
    s.ragged = false;
    return {{s, {}, {}}};
  }
  const int64_t long_max_seq = pow2_at_least(std::max(d.longest, max_seq), kCudnnMinSeq);
  if (window <= 0) {
    s.batch = pow2_at_least(d.count, 1);
    s.max_seq = long_max_seq;
    std::vector<int32_t> start, length;
    cuda::sdpa_documents(cu, d.count, start, length);
    cuda::longest_first(start, length);
    return {sequences_call(s, start, length, tokens, q.device())};
  }
  cuda::SdpaWindows w = cuda::sdpa_windows(cu, d.count, window);
  std::vector<Call> calls;
  if (!w.start.empty()) {
    cuda::SdpaShape ws = s;
    ws.batch = pow2_at_least(static_cast<int64_t>(w.start.size()), 1);
    ws.max_seq = window;
    ws.bias = true;
    Call c = sequences_call(ws, w.start, w.length, tokens, q.device());
    torch::Tensor ids = pinned(ws.batch * window, torch::kInt32);
    cuda::fill_window_documents(cu, w, ws, ids.data_ptr<int32_t>());
    const torch::Tensor rows = upload(ids, q.device()).view({ws.batch, 1, window, 1});
    const torch::Tensor same = rows == rows.view({ws.batch, 1, 1, window});  // [batch, 1, window, window]
    c.bias = torch::full({ws.batch, 1, window, window}, -std::numeric_limits<float>::infinity(), q.options())
                 .masked_fill_(same, 0);
    calls.push_back(std::move(c));
  }
  if (!w.long_start.empty()) {
    cuda::SdpaShape ls = s;
    ls.batch = pow2_at_least(static_cast<int64_t>(w.long_start.size()), 1);
    ls.max_seq = long_max_seq;
    cuda::longest_first(w.long_start, w.long_length);  // the windows keep their order: the bias rows follow it
    calls.push_back(sequences_call(ls, w.long_start, w.long_length, tokens, q.device()));
  }
  return calls;
}

// Every layer of a step meets the same documents: the calls this thread planned last are reused
// while the documents, the graphs' inputs and the stream are the same, so a micro-batch's layouts
// and bias are uploaded and built once, not once a layer.
const std::vector<Call>& calls_of(const torch::Tensor& cu_host, const Documents& d, int64_t max_seq, int64_t window,
                                  const torch::Tensor& q, const torch::Tensor& k) {
  struct Last {
    std::vector<int64_t> key;
    std::vector<int32_t> cu;
    std::vector<Call> calls;
  };
  // Never destroyed, like the graphs: its tensors would outlive CUDA at exit.
  thread_local auto& last = *new Last();
  const std::vector<int64_t> key{q.get_device(), static_cast<int64_t>(at::cuda::getCurrentCUDAStream().id()),
                                 max_seq, window, q.size(0), q.size(1), k.size(1), q.size(2),
                                 static_cast<int64_t>(q.scalar_type())};
  const int32_t* cu = cu_host.data_ptr<int32_t>();
  if (key != last.key || !std::equal(cu, cu + d.count + 1, last.cu.begin(), last.cu.end())) {
    last.key.clear();  // the old calls go before the new ones are built (and stay gone if that throws)
    last.calls.clear();
    last.calls = plan_calls(cu_host, d, max_seq, window, q, k);
    last.key = key;
    last.cu.assign(cu, cu + d.count + 1);
  }
  return last.calls;
}

void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }

size_t workspace_bytes(const std::vector<Call>& calls, cuda::SdpaGraph::Pass pass, int64_t tokens) {
  size_t bytes = 0;
  for (const Call& c : calls) bytes = std::max(bytes, graph_of(pass, c.shape).workspace_bytes(tokens));
  return bytes;
}

torch::Tensor workspace(size_t bytes, const torch::Device& device) {
  return torch::empty({std::max<int64_t>(static_cast<int64_t>(bytes), 16)},
                      torch::TensorOptions().dtype(torch::kUInt8).device(device));
}

// Dropout 0, causal within every document. Saved: q, k, v, the output, the log-sum-exp [Tok, H]
// fp32, and each call's layout and bias on the device (two calls at most) with its shape.
class CudnnAttention : public torch::autograd::Function<CudnnAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& cu_host, double scale, int64_t max_seq,
                               int64_t window) {
    const c10::cuda::CUDAGuard guard(q.device());
    const int64_t tokens = q.size(0);
    const Documents d = read_documents(cu_host, tokens);
    const std::vector<Call>& calls = calls_of(cu_host, d, max_seq, window, q, k);
    torch::Tensor out = torch::empty_like(q);
    torch::Tensor stats = torch::empty({tokens, q.size(1)}, q.options().dtype(torch::kFloat32));
    const torch::Tensor ws = workspace(workspace_bytes(calls, cuda::SdpaGraph::Pass::kForward, tokens), q.device());
    torch::autograd::variable_list saved{q, k, v, out, stats};
    std::vector<int64_t> shapes;
    for (const Call& c : calls) {
      const char* err = graph_of(cuda::SdpaGraph::Pass::kForward, c.shape)
                            .forward(layout_of(c, tokens), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                     stats.data_ptr<float>(), static_cast<float>(scale), ws.data_ptr(), stream());
      LOOM_CHECK(err == nullptr, "cuDNN attention forward: ", err);
      saved.push_back(c.layout);
      saved.push_back(c.bias);
      push_shape(shapes, c.shape);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["shapes"] = shapes;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &q = s[0], &k = s[1], &v = s[2], &out = s[3], &stats = s[4];
    const c10::cuda::CUDAGuard guard(q.device());
    const std::vector<int64_t> shapes = ctx->saved_data["shapes"].toIntVector();
    std::vector<Call> calls;
    for (size_t i = 0, j = 5; i + 8 <= shapes.size(); i += 8, j += 2)
      calls.push_back({shape_at(shapes, i), s[j], s[j + 1]});
    const int64_t tokens = q.size(0);
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
    const torch::Tensor ws = workspace(workspace_bytes(calls, cuda::SdpaGraph::Pass::kBackward, tokens), q.device());
    for (const Call& c : calls) {
      const char* err = graph_of(cuda::SdpaGraph::Pass::kBackward, c.shape)
                            .backward(layout_of(c, tokens), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                      g.data_ptr(), stats.data_ptr<float>(), dq.data_ptr(), dk.data_ptr(),
                                      dv.data_ptr(), static_cast<float>(ctx->saved_data["scale"].toDouble()),
                                      ws.data_ptr(), stream());
      LOOM_CHECK(err == nullptr, "cuDNN attention backward: ", err);
    }
    return {dq, dk, dv, {}, {}, {}, {}};
  }
};
#endif

}  // namespace

torch::Tensor cudnn_segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& cu_seqlens_host, double scale, int64_t max_seq,
                                      int64_t window) {
  LOOM_CHECK(window == 0 || (window >= kCudnnMinSeq && (window & (window - 1)) == 0),
             "cuDNN attention's windows hold a power of two of at least ", kCudnnMinSeq, " tokens, got ", window);
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
                               max_seq, window);
#else
  (void)cu_seqlens_host;
  (void)scale;
  (void)max_seq;
  (void)window;
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
    // Short documents in a window (the bias) beside a longer one: the rule's branch for them.
    const torch::Tensor windows = torch::tensor({0, 1, 2, 131}, torch::dtype(torch::kInt32));
    cudnn_segment_attention(x, x, x, windows, 1.0, 0, kCudnnMinSeq).sum().backward();
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
                   int64_t max_seq, int64_t tokens, int64_t documents, bool whole, bool backward, int64_t window = 0) {
  const torch::Tensor q = torch::zeros({tokens, heads, head_dim}, opt).requires_grad_(backward);
  const torch::Tensor kv = torch::zeros({tokens, kv_heads, head_dim}, opt).requires_grad_(backward);
  std::vector<int32_t> cu(static_cast<size_t>(documents) + 1);
  for (int64_t i = 0; i <= documents; ++i) cu[static_cast<size_t>(i)] = static_cast<int32_t>(i * tokens / documents);
  if (!whole) cu[1] -= 1;
  const torch::Tensor out =
      cudnn_segment_attention(q, kv, kv, torch::tensor(cu, torch::dtype(torch::kInt32)), 1.0, max_seq, window);
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

#if LOOM_CUDNN_SDPA
// With windows, a micro-batch meets the biased graph of every power of two of windows up to
// cudnn_most_windows, and beside it the plain graph of every power of two of longer documents up to
// tokens / (window + 1) (none when no document can be longer than a window). They are built
// directly (graph_of), as no one micro-batch meets them all.
std::vector<int64_t> window_shapes(const torch::TensorOptions& opt, const std::vector<int64_t>& s, int64_t window) {
  const int64_t seq_len = s[3], tokens = s[4];
  const bool half = opt.dtype() == torch::kHalf;
  std::vector<int64_t> shapes;
  for (int64_t b = 1; b <= cudnn_most_windows(tokens, window); b *= 2)
    push_shape(shapes, {b, window, s[0], s[1], s[2], half, /*ragged=*/true, /*bias=*/true});
  if (seq_len > window)
    for (int64_t b = 1; b <= pow2_at_least(std::max<int64_t>(tokens / (window + 1), 1), 1); b *= 2)
      push_shape(shapes, {b, pow2_at_least(seq_len, kCudnnMinSeq), s[0], s[1], s[2], half, true, false});
  return shapes;
}

void build_graphs(const std::vector<int64_t>& shapes, bool forward, bool backward) {
  for (size_t i = 0; i + 8 <= shapes.size(); i += 8) {
    if (forward) graph_of(cuda::SdpaGraph::Pass::kForward, shape_at(shapes, i));
    if (backward) graph_of(cuda::SdpaGraph::Pass::kBackward, shape_at(shapes, i));
  }
}
#else
void build_graphs(const std::vector<int64_t>&, bool, bool) {}
#endif

// Its backward runs on the autograd engine's thread, where cuDNN's backward graphs run and a
// checkpointed layer's forward is recomputed: there it runs the forwards of run_every_count (with
// "recompute") and builds the graphs of "shapes" (their forwards too with "recompute").
class OnBackwardThread : public torch::autograd::Function<OnBackwardThread> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const std::vector<int64_t>& run, const std::vector<int64_t>& shapes, bool recompute) {
    ctx->saved_data["run"] = run;
    ctx->saved_data["shapes"] = shapes;
    ctx->saved_data["recompute"] = recompute;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::NoGradGuard no_grad;
    const bool recompute = ctx->saved_data["recompute"].toBool();
    if (recompute) run_every_count(grads[0].options(), ctx->saved_data["run"].toIntVector(), /*backward=*/false);
    build_graphs(ctx->saved_data["shapes"].toIntVector(), /*forward=*/recompute, /*backward=*/true);
    return {grads[0], {}, {}, {}};
  }
};

}  // namespace

int64_t warm_cudnn_attention(const torch::Device& device, torch::Dtype dtype, int64_t heads, int64_t kv_heads,
                             int64_t head_dim, int64_t seq_len, int64_t tokens, int64_t max_documents, bool recompute,
                             int64_t window) {
  const auto opt = torch::TensorOptions().device(device).dtype(dtype);
  // The graph a call of up to max_documents documents rounds up to.
  const int64_t most = pow2_at_least(std::min(max_documents, tokens), 1);
  const std::vector<int64_t> run{heads, kv_heads, head_dim, seq_len, tokens, most};
  const ExpectedBuilds expected;
  run_every_count(opt, run, /*backward=*/true);
  std::vector<int64_t> shapes;
  if (window > 0) {
#if LOOM_CUDNN_SDPA
    shapes = window_shapes(opt, run, window);
    build_graphs(shapes, /*forward=*/true, /*backward=*/false);
#endif
    // One call through the windows (documents of about 16 tokens) loads their kernels.
    run_documents(opt, heads, kv_heads, head_dim, seq_len, tokens, std::max<int64_t>(tokens / 16, 1), false, true,
                  window);
  }
  if (recompute || !shapes.empty()) {
    const torch::Tensor x = torch::zeros({1}, opt).requires_grad_();
    OnBackwardThread::apply(x, run, shapes, recompute).sum().backward();
  }
  return most;
}

}  // namespace loom
