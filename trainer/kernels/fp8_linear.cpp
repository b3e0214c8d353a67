#include "fp8_linear.h"

#include <mutex>
#include <unordered_map>
#include <utility>

#include "fused_ops.h"
#include "loom/error.h"
#include "torch_compat.h"
#include "weight_grad.h"

#if defined(LOOM_CUDA_KERNELS) && LOOM_TORCH2
#define LOOM_FP8 1
#include <ATen/cuda/CUDAContext.h>

#include "cuda/kernels.h"
#else
#define LOOM_FP8 0
#endif

namespace loom {

bool fp8_supported(const torch::Device& device, std::string* why) {
  const auto fail = [why](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
#if LOOM_FP8
  if (!device.is_cuda()) return fail("FP8 matmuls need a CUDA device; this run is on " + device.str());
  const int index = device.has_index() ? device.index() : at::cuda::current_device();
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(index);
  if (p->major * 10 + p->minor < 89)
    return fail(std::string("the GPU (") + p->name + ", compute capability " + std::to_string(p->major) + "." +
                std::to_string(p->minor) + ") has no FP8 tensor cores: they need 8.9 or higher (Ada, Hopper)");
  return true;
#else
  (void)device;
  return fail("this build of loom-train has no FP8 path: it needs a CUDA build against LibTorch 2.x");
#endif
}

bool fp8_linear_applies(const torch::Tensor& x, const torch::Tensor& weight) {
#if LOOM_FP8
  if (!x.is_cuda() || x.scalar_type() != torch::kBFloat16 || weight.scalar_type() != torch::kBFloat16) return false;
  const int64_t K = x.size(-1), N = weight.size(0);
  if (K == 0 || K % 16 != 0 || N % 16 != 0 || weight.dim() != 2 || weight.size(1) != K) return false;
  const int64_t rows = x.numel() / K;
  return rows > 0 && rows % 16 == 0;
#else
  (void)x;
  (void)weight;
  return false;
#endif
}

namespace {

struct PublishedAmax {
  // Weak: an activation's entry must not keep it alive; and a dead tensor's address, reused by a
  // new one, no longer matches.
  c10::weak_intrusive_ptr<c10::TensorImpl> tensor;
  int64_t version = 0;
  torch::Tensor amax;
  // A weight's e4m3 copies (fp8_linear's cache_weight), valid with this publication: the
  // optimizer republishes after every update and forgets the maximum when something else writes
  // the weight, and either drops this entry.
  torch::Tensor q, q_t, scale;
};

// The forward publishes from the training thread, a CUDA backward from the autograd engine's.
struct Registry {
  std::mutex mu;
  std::unordered_map<const c10::TensorImpl*, PublishedAmax> map;
  size_t sweep_at = 1024;  // entries of dead tensors are dropped when the map grows past this
};

Registry& registry() {
  static Registry r;
  return r;
}

// t's entry while t is alive and unchanged since its publication, else nullptr. Caller holds r.mu.
PublishedAmax* live_entry(Registry& r, const torch::Tensor& t) {
  const auto it = r.map.find(t.unsafeGetTensorImpl());
  if (it == r.map.end()) return nullptr;
  const c10::intrusive_ptr<c10::TensorImpl> alive = it->second.tensor.lock();
  if (alive.get() != t.unsafeGetTensorImpl() || it->second.version != static_cast<int64_t>(t._version())) return nullptr;
  return &it->second;
}

}  // namespace

void fp8_publish_amax(const torch::Tensor& t, const torch::Tensor& amax) {
  LOOM_ASSERT(amax.defined() && amax.numel() == 1 && amax.scalar_type() == torch::kFloat32 && amax.device() == t.device(),
              "fp8_publish_amax: amax must be one fp32 value on the tensor's device");
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  // A new entry: a weight republished has changed, and its cached copies go with the old one.
  r.map.insert_or_assign(t.unsafeGetTensorImpl(),
                         PublishedAmax{c10::weak_intrusive_ptr<c10::TensorImpl>(t.getIntrusivePtr()),
                                       static_cast<int64_t>(t._version()), amax, {}, {}, {}});
  if (r.map.size() > r.sweep_at) {
    for (auto it = r.map.begin(); it != r.map.end();) it = it->second.tensor.expired() ? r.map.erase(it) : std::next(it);
    r.sweep_at = 2 * r.map.size() + 1024;
  }
}

void fp8_forget_amax(const torch::Tensor& t) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  r.map.erase(t.unsafeGetTensorImpl());
}

torch::Tensor fp8_published_amax(const torch::Tensor& t) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  const PublishedAmax* e = live_entry(r, t);
  return e != nullptr ? e->amax : torch::Tensor();
}

#if LOOM_FP8
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }
void check_launch(const char* error, const char* kernel) {
  LOOM_CHECK(error == nullptr, "CUDA kernel ", kernel, " failed to launch: ", error);
}

struct Quantized {
  torch::Tensor q;      // [rows, cols], when asked for
  torch::Tensor q_t;    // [cols, rows], when asked for
  torch::Tensor scale;  // fp32 scalar on the device: x ~ q * scale
};

// x [rows, cols] contiguous bf16 on CUDA: its absolute maximum (unless known: an fp32 scalar on the
// device), then both layouts asked for in one pass.
Quantized quantize(const torch::Tensor& x, cuda::Fp8Format format, bool row_major, bool transposed,
                   const torch::Tensor& known_amax = {}) {
  LOOM_ASSERT(x.is_contiguous() && x.scalar_type() == torch::kBFloat16, "quantize: x must be contiguous bf16");
  // The kernels load 8 and 16 bytes at a time: a view at an odd offset is copied to fresh memory.
  if (reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0)
    return quantize(x.clone(), format, row_major, transposed, known_amax);
  const int64_t rows = x.size(0), cols = x.size(1);
  const auto f32 = x.options().dtype(torch::kFloat32);
  const auto fp8 = x.options().dtype(format == cuda::Fp8Format::kE4M3 ? at::ScalarType::Float8_e4m3fn
                                                                      : at::ScalarType::Float8_e5m2);
  Quantized r;
  r.scale = torch::empty({}, f32);
  if (row_major) r.q = torch::empty({rows, cols}, fp8);
  if (transposed) r.q_t = torch::empty({cols, rows}, fp8);
  torch::Tensor amax = known_amax;  // max |x|, read by the quantize kernel
  if (!amax.defined()) {
    amax = torch::empty({1}, f32);
    check_launch(cuda::fp8_amax_bf16(x.data_ptr(), x.numel(), amax.data_ptr<float>(), stream()), "fp8_amax_bf16");
  }
  check_launch(cuda::fp8_quantize_bf16(x.data_ptr(), rows, cols, amax.data_ptr<float>(), format,
                                       row_major ? r.q.data_ptr() : nullptr, transposed ? r.q_t.data_ptr() : nullptr,
                                       r.scale.data_ptr<float>(), stream()),
               "fp8_quantize_bf16");
  return r;
}

// a [M, K] row-major times b [K, N] column-major (the .t() of a contiguous [N, K]), bf16 out.
torch::Tensor scaled_mm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& scale_a,
                        const torch::Tensor& scale_b, const torch::Tensor& bias, bool fast_accum) {
  std::optional<torch::Tensor> bias_opt;
  if (bias.defined()) bias_opt = bias;
  return at::_scaled_mm(a, b, scale_a, scale_b, bias_opt, std::nullopt, at::kBFloat16, fast_accum);
}

// The weight's cached quantization while its publication holds, else an undefined q (and copies
// kept for a weight written since go now).
Quantized cached_weight(const torch::Tensor& weight) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  if (const PublishedAmax* e = live_entry(r, weight)) return {e->q, e->q_t, e->scale};
  const auto stale = r.map.find(weight.unsafeGetTensorImpl());
  if (stale != r.map.end()) stale->second.q = stale->second.q_t = stale->second.scale = torch::Tensor();
  return {};
}

// Keeps qw with the weight's publication, if one holds for its present version: only then does a
// republication say when it changed (the optimizer's update writes it behind ATen's version
// counter).
void cache_weight(const torch::Tensor& weight, const Quantized& qw) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  if (PublishedAmax* e = live_entry(r, weight)) {
    e->q = qw.q;
    e->q_t = qw.q_t;
    e->scale = qw.scale;
  }
}

// One linear's forward GEMM from its input's quantization: y [rows, N] bf16. W is quantized in
// both layouts in the same pass, from its published maximum where one holds; the transposed copy
// (and its scale) goes to the backward in *qw_t, where quantizing W again would read its bf16
// bytes twice more (amax and values). cache: both layouts are kept for the weight's next forwards
// until it changes (a step's later micro-batches skip the pass).
torch::Tensor forward_gemm(const Quantized& qx, const torch::Tensor& weight, const torch::Tensor& bias, bool cache,
                           Quantized* qw_t) {
  Quantized qw = cache ? cached_weight(weight) : Quantized{};
  if (!qw.q.defined()) {
    qw = quantize(weight.contiguous(), cuda::Fp8Format::kE4M3, /*row_major=*/true, /*transposed=*/true,
                  fp8_published_amax(weight));
    if (cache) cache_weight(weight, qw);
  }
  torch::Tensor y = scaled_mm(qx.q, qw.q.t(), qx.scale, qw.scale, bias, /*fast_accum=*/true);
  qw.q = torch::Tensor();  // the backward needs only the transposed layout
  *qw_t = std::move(qw);
  return y;
}

// g [N, K] bf16 = dW, or += dW (add), from e5m2 dy's transposed copy and x's: one cuBLASLt GEMM
// (cuda::fp8_weight_grad) where it takes the case, else _scaled_mm and a copy or an add.
void weight_grad_gemm(const Quantized& qdy, const torch::Tensor& qx_t, const torch::Tensor& scale_x, torch::Tensor g,
                      bool add) {
  const int64_t out = qdy.q_t.size(0), rows = qdy.q_t.size(1), in = qx_t.size(0);
  const torch::Tensor workspace =
      torch::empty({static_cast<int64_t>(cuda::kFp8GemmWorkspaceBytes)}, g.options().dtype(torch::kUInt8));
  const cuda::GemmResult r = cuda::fp8_weight_grad(qdy.q_t.data_ptr(), qx_t.data_ptr(), qdy.scale.data_ptr<float>(),
                                                   scale_x.data_ptr<float>(), rows, in, out, g.data_ptr(), add,
                                                   workspace.data_ptr(), cuda::kFp8GemmWorkspaceBytes, stream());
  LOOM_CHECK(r.status != cuda::GemmStatus::kFailed, "the FP8 weight-gradient GEMM of [", out, ", ", in, "] over ", rows,
             " rows failed: ", r.error);
  if (r.status == cuda::GemmStatus::kDone) return;
  const torch::Tensor dw = scaled_mm(qdy.q_t, qx_t.t(), qdy.scale, scale_x, {}, /*fast_accum=*/false);
  if (add)
    g.add_(dw);
  else
    g.copy_(dw);
}

// One linear's backward GEMMs from its output's gradient as autograd hands it over: {dx [rows, K],
// what to return for W [N, K]} (weight_gradient: undefined where W's gradient was added to).
std::pair<torch::Tensor, torch::Tensor> backward_gemms(const torch::Tensor& grad, const torch::Tensor& weight,
                                                       const torch::Tensor& qw_t, const torch::Tensor& scale_w,
                                                       const torch::Tensor& qx_t, const torch::Tensor& scale_x) {
  const torch::Tensor dy = grad.reshape({-1, qw_t.size(1)}).contiguous();
  const Quantized qdy =
      quantize(dy, cuda::Fp8Format::kE5M2, /*row_major=*/true, /*transposed=*/true, fp8_published_amax(grad));
  torch::Tensor dx = scaled_mm(qdy.q, qw_t.t(), qdy.scale, scale_w, {}, /*fast_accum=*/false);
  torch::Tensor dw =
      weight_gradient(weight, [&](torch::Tensor g, bool add) { weight_grad_gemm(qdy, qx_t, scale_x, g, add); });
  return {dx, dw};
}

// x [..., K] -> [rows, K], quantized in both layouts (the backward keeps the transposed one).
Quantized quantize_input(const torch::Tensor& x) {
  return quantize(x.reshape({-1, x.size(-1)}).contiguous(), cuda::Fp8Format::kE4M3, /*row_major=*/true,
                  /*transposed=*/true, fp8_published_amax(x));
}

// y viewed as x's leading dims and n outputs.
torch::Tensor output_view(const torch::Tensor& y, const torch::Tensor& x, int64_t n) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = n;
  return y.view(sizes);
}

// The weight and bias are saved as the leaves they are (no copy): the backward adds into their
// gradients (weight_grad.h).
torch::Tensor fp8_forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias, bool cache_weight) {
  const Quantized qx = quantize_input(x);
  Quantized qw;
  const torch::Tensor y = forward_gemm(qx, weight, bias, cache_weight, &qw);
  ctx->save_for_backward({qx.q_t, qx.scale, qw.q_t, qw.scale, weight, bias});
  ctx->saved_data["x_sizes"] = x.sizes().vec();
  return output_view(y, x, weight.size(0));
}

// {dx, dW} and db where the forward had a bias.
variable_list fp8_backward(AutogradContext* ctx, const variable_list& grads) {
  const variable_list saved = ctx->get_saved_variables();
  const torch::Tensor &qx_t = saved[0], &scale_x = saved[1], &qw_t = saved[2], &scale_w = saved[3];
  const torch::Tensor &weight = saved[4], &bias = saved[5];
  const auto [dx, dw] = backward_gemms(grads[0], weight, qw_t, scale_w, qx_t, scale_x);
  variable_list out{dx.view(ctx->saved_data["x_sizes"].toIntVector()), dw};
  if (bias.defined()) {
    const torch::Tensor dy = grads[0].reshape({-1, qw_t.size(1)});
    out.push_back(weight_gradient(bias, [&](torch::Tensor g, bool add) { fused_bias_grad(g, dy, add); }));
  }
  return out;
}

// Two functions because a custom autograd function's inputs must all be defined tensors.
class Fp8LinearFn : public torch::autograd::Function<Fp8LinearFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, bool cache_weight) {
    return fp8_forward(ctx, x, weight, bias, cache_weight);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out = fp8_backward(ctx, grads);
    out.emplace_back();  // cache_weight
    return out;
  }
};

class Fp8LinearNoBiasFn : public torch::autograd::Function<Fp8LinearNoBiasFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               bool cache_weight) {
    return fp8_forward(ctx, x, weight, {}, cache_weight);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out = fp8_backward(ctx, grads);
    out.emplace_back();  // cache_weight
    return out;
  }
};

// Two bias-free linears of one input (the MLP's w1 and w2): x is quantized once and its e4m3 copy
// saved once; the backward sums the two input gradients itself, as autograd would.
class Fp8SharedInputFn : public torch::autograd::Function<Fp8SharedInputFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w1,
                               const torch::Tensor& w2, bool cache_weights) {
    const Quantized qx = quantize_input(x);
    variable_list out, saved{qx.q_t, qx.scale};
    for (const torch::Tensor& weight : {w1, w2}) {
      Quantized qw;
      out.push_back(output_view(forward_gemm(qx, weight, {}, cache_weights, &qw), x, weight.size(0)));
      saved.push_back(qw.q_t);
      saved.push_back(qw.scale);
      saved.push_back(weight);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &qx_t = saved[0], &scale_x = saved[1];
    torch::Tensor dx;
    variable_list dws;
    for (size_t i = 0; i < 2; ++i) {
      const torch::Tensor &qw_t = saved[2 + 3 * i], &scale_w = saved[3 + 3 * i], &weight = saved[4 + 3 * i];
      if (!grads[i].defined()) {  // that output took no part in the loss
        dws.emplace_back();
        continue;
      }
      auto [dxi, dwi] = backward_gemms(grads[i], weight, qw_t, scale_w, qx_t, scale_x);
      dx = dx.defined() ? dx.add_(dxi) : dxi;
      dws.push_back(dwi);
    }
    if (dx.defined()) dx = dx.view(ctx->saved_data["x_sizes"].toIntVector());
    return {dx, dws[0], dws[1], torch::Tensor()};
  }
};

}  // namespace
#endif  // LOOM_FP8

torch::Tensor fp8_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                         bool cache_weight) {
  LOOM_ASSERT(fp8_linear_applies(x, weight), "fp8_linear called on tensors it does not take: x ", x.sizes(), " ",
              x.scalar_type(), ", weight ", weight.sizes(), " ", weight.scalar_type());
#if LOOM_FP8
  return bias.defined() ? Fp8LinearFn::apply(x, weight, bias, cache_weight)
                        : Fp8LinearNoBiasFn::apply(x, weight, cache_weight);
#else
  (void)bias, (void)cache_weight;
  return {};
#endif
}

torch::Tensor fp8_round_trip(const torch::Tensor& x, bool e5m2) {
  LOOM_ASSERT(x.dim() == 2 && fp8_linear_applies(x, x.new_empty({16, x.size(1)})),
              "fp8_round_trip: x must be [rows, cols] bf16 on CUDA with both sizes multiples of 16");
#if LOOM_FP8
  const Quantized q = quantize(x.contiguous(), e5m2 ? cuda::Fp8Format::kE5M2 : cuda::Fp8Format::kE4M3, true, false);
  return q.q.to(torch::kFloat32) * q.scale;
#else
  (void)e5m2;
  return {};
#endif
}

std::vector<torch::Tensor> fp8_linear_pair(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2,
                                           bool cache_weights) {
  LOOM_ASSERT(fp8_linear_applies(x, w1) && fp8_linear_applies(x, w2), "fp8_linear_pair called on tensors it does not take");
#if LOOM_FP8
  return Fp8SharedInputFn::apply(x, w1, w2, cache_weights);
#else
  (void)cache_weights;
  return {};
#endif
}

}  // namespace loom
