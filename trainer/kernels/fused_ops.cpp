#include "fused_ops.h"

#include "cpu_kernels.h"
#include "fp8_linear.h"
#include "loom/error.h"
#include "qkv_layout.h"
#include "weight_grad.h"

#ifdef LOOM_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>

#include "cuda/kernels.h"
#endif

namespace loom {

bool fused_kernels_available() {
#ifdef LOOM_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool cpu_fused_applies(const torch::Tensor& t) { return cpu::kernels_apply(t); }

namespace {
// The references compute in fp32, or in float64 for float64 inputs (the tests' ground truth).
torch::Dtype compute_dtype(const torch::Tensor& x) { return at::promote_types(x.scalar_type(), torch::kFloat32); }
}  // namespace

torch::Tensor rmsnorm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const torch::Tensor xf = x.to(compute_dtype(x));
  const torch::Tensor normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normed * weight.to(xf.scalar_type())).to(x.scalar_type());
}

torch::Tensor rotary_reference(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor xf = x.to(compute_dtype(x));
  const torch::Tensor a = xf.narrow(-1, 0, half), b = xf.narrow(-1, half, half);
  const torch::Tensor c = cos.unsqueeze(-2), s = sin.unsqueeze(-2);  // broadcast over heads
  return torch::cat({a * c - b * s, b * c + a * s}, -1).to(x.scalar_type());
}

torch::Tensor swiglu_reference(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Dtype f = compute_dtype(a);
  return (torch::silu(a.to(f)) * b.to(f)).to(a.scalar_type());
}

#ifdef LOOM_CUDA_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool kernel_dtype(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kFloat32;
}
cuda::Dtype to_cuda(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? cuda::Dtype::kBFloat16 : cuda::Dtype::kFloat32;
}
void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }
// Whether t's data may be read with 16-byte loads.
bool aligned(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }
void check_launch(const char* error, const char* kernel) {
  LOOM_CHECK(error == nullptr, "CUDA kernel ", kernel, " failed to launch: ", error);
}

// An fp32 scalar for a kernel's optional amax output, or undefined when none is wanted.
torch::Tensor amax_for(bool wanted, const torch::Tensor& like) {
  return wanted ? torch::empty({}, like.options().dtype(torch::kFloat32)) : torch::Tensor();
}
float* ptr(const torch::Tensor& amax) { return amax.defined() ? amax.data_ptr<float>() : nullptr; }
void publish(const torch::Tensor& t, const torch::Tensor& amax) {
  if (amax.defined()) fp8_publish_amax(t, amax);
}

class RMSNormFn : public torch::autograd::Function<RMSNormFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& weight,
                               double eps, bool publish_fp8_amax) {
    const torch::Tensor x = x_in.contiguous();
    const int64_t C = x.size(-1), rows = x.numel() / C;
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
    const torch::Tensor w = weight.contiguous();
    const torch::Tensor amax = amax_for(publish_fp8_amax, x);
    check_launch(cuda::rmsnorm_forward(to_cuda(x), x.data_ptr(), nullptr, w.data_ptr(), y.data_ptr(), nullptr,
                                       rstd.data_ptr<float>(), rows, C, static_cast<float>(eps), ptr(amax), stream()),
                 "rmsnorm_forward");
    publish(y, amax);
    ctx->save_for_backward({x, w, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &x = s[0], &w = s[1], &rstd = s[2];
    const torch::Tensor dy = grads[0].contiguous();
    const int64_t C = x.size(-1), rows = x.numel() / C;
    torch::Tensor dx = torch::empty_like(x);
    torch::Tensor dw_partial =
        torch::empty({cuda::rmsnorm_backward_blocks(rows), C}, x.options().dtype(torch::kFloat32));
    check_launch(cuda::rmsnorm_backward(to_cuda(x), dy.data_ptr(), x.data_ptr(), w.data_ptr(), rstd.data_ptr<float>(),
                                        nullptr, dx.data_ptr(), dw_partial.data_ptr<float>(), rows, C, stream()),
                 "rmsnorm_backward");
    return {dx, dw_partial.sum(0).to(w.scalar_type()), {}, {}};
  }
};

// {h, rmsnorm(h)}: h = x + r (AddRMSNormFn) or x itself (ResidualRMSNormFn). The backward gets h's
// gradient (the residual stream's) and the norm output's together and writes their sum as x's
// gradient in the norm's one pass. Two functions: autograd takes no undefined input.
variable_list residual_rmsnorm_forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& r_in,
                                       const torch::Tensor& weight, double eps, bool publish_fp8_amax) {
  const torch::Tensor x = x_in.contiguous();
  const int64_t C = x.size(-1), rows = x.numel() / C;
  const torch::Tensor r = r_in.defined() ? r_in.contiguous() : torch::Tensor();
  torch::Tensor h = r.defined() ? torch::empty_like(x) : x_in;
  torch::Tensor y = torch::empty_like(x);
  torch::Tensor rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
  const torch::Tensor w = weight.contiguous();
  const torch::Tensor amax = amax_for(publish_fp8_amax, x);
  check_launch(cuda::rmsnorm_forward(to_cuda(x), x.data_ptr(), r.defined() ? r.data_ptr() : nullptr, w.data_ptr(),
                                     y.data_ptr(), r.defined() ? h.data_ptr() : nullptr, rstd.data_ptr<float>(), rows, C,
                                     static_cast<float>(eps), ptr(amax), stream()),
               "rmsnorm_forward");
  publish(y, amax);
  ctx->save_for_backward({r.defined() ? h : x, w, rstd});
  return {h, y};
}

// {x's gradient, the weight's}.
std::pair<torch::Tensor, torch::Tensor> residual_rmsnorm_backward(AutogradContext* ctx, const variable_list& grads) {
  const variable_list s = ctx->get_saved_variables();
  const torch::Tensor &h = s[0], &w = s[1], &rstd = s[2];
  const torch::Tensor dres = grads[0].defined() ? grads[0].contiguous() : torch::Tensor();
  const torch::Tensor dy = grads[1].defined() ? grads[1].contiguous() : torch::zeros_like(h);
  const int64_t C = h.size(-1), rows = h.numel() / C;
  torch::Tensor dx = torch::empty_like(h);
  torch::Tensor dw_partial = torch::empty({cuda::rmsnorm_backward_blocks(rows), C}, h.options().dtype(torch::kFloat32));
  check_launch(cuda::rmsnorm_backward(to_cuda(h), dy.data_ptr(), h.data_ptr(), w.data_ptr(), rstd.data_ptr<float>(),
                                      dres.defined() ? dres.data_ptr() : nullptr, dx.data_ptr(),
                                      dw_partial.data_ptr<float>(), rows, C, stream()),
               "rmsnorm_backward");
  return {dx, dw_partial.sum(0).to(w.scalar_type())};
}

class ResidualRMSNormFn : public torch::autograd::Function<ResidualRMSNormFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps,
                               bool publish_fp8_amax) {
    return residual_rmsnorm_forward(ctx, x, {}, weight, eps, publish_fp8_amax);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto [dx, dw] = residual_rmsnorm_backward(ctx, grads);
    return {dx, dw, {}, {}};
  }
};

class AddRMSNormFn : public torch::autograd::Function<AddRMSNormFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& r,
                               const torch::Tensor& weight, double eps, bool publish_fp8_amax) {
    return residual_rmsnorm_forward(ctx, x, r, weight, eps, publish_fp8_amax);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto [dx, dw] = residual_rmsnorm_backward(ctx, grads);
    return {dx, dx, dw, {}, {}};
  }
};

class RotaryFn : public torch::autograd::Function<RotaryFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return run(x, cos, sin, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    return {run(grads[0], s[0], s[1], true), {}, {}};
  }
  static torch::Tensor run(const torch::Tensor& x_in, const torch::Tensor& cos, const torch::Tensor& sin,
                           bool inverse) {
    // Read q/k in place from the fused QKV output when its layout allows: heads contiguous inside a
    // token, one stride between tokens over every leading dim.
    const int64_t D = x_in.size(-1), heads = x_in.size(-2), tokens = x_in.numel() / (D * heads);
    bool strided = x_in.dim() >= 3 && x_in.stride(-1) == 1 && x_in.stride(-2) == D;
    for (int64_t d = 0; strided && d + 3 < x_in.dim(); ++d) {
      strided = x_in.stride(d) == x_in.stride(d + 1) * x_in.size(d + 1);
    }
    const torch::Tensor x = strided ? x_in : x_in.contiguous();
    const int64_t token_stride = strided ? x_in.stride(-3) : heads * D;
    torch::Tensor y = torch::empty(x_in.sizes(), x_in.options());
    check_launch(cuda::rotary(to_cuda(x), x.data_ptr(), token_stride, cos.data_ptr<float>(), sin.data_ptr<float>(),
                              y.data_ptr(), heads * D, tokens, heads, D, inverse, nullptr, stream()),
                 "rotary");
    return y;
  }
};

// q and k rotated and v out of a contiguous fused QKV projection [..., (H + 2K) D]; the backward
// writes all three gradients into one tensor of qkv's shape (no zero-filled tensor per slice).
class QkvRotaryFn : public torch::autograd::Function<QkvRotaryFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& qkv, const torch::Tensor& cos,
                               const torch::Tensor& sin, int64_t H, int64_t K, bool publish_fp8_amax) {
    const QkvLayout l(qkv.sizes().vec(), H, K);
    const int64_t W = l.W, D = l.D, tokens = l.tokens;
    torch::Tensor q = torch::empty(l.head_sizes(H), qkv.options()), k = torch::empty(l.head_sizes(K), qkv.options());
    char* base = static_cast<char*>(qkv.data_ptr());
    const int64_t es = qkv.element_size();
    check_launch(cuda::rotary(to_cuda(qkv), base, W, cos.data_ptr<float>(), sin.data_ptr<float>(), q.data_ptr(), H * D,
                              tokens, H, D, false, nullptr, stream()),
                 "rotary");
    check_launch(cuda::rotary(to_cuda(qkv), base + H * D * es, W, cos.data_ptr<float>(), sin.data_ptr<float>(),
                              k.data_ptr(), K * D, tokens, K, D, false, nullptr, stream()),
                 "rotary");
    torch::Tensor v = torch::empty(l.head_sizes(K), qkv.options());
    check_launch(cuda::copy_rows(to_cuda(qkv), base + (H + K) * D * es, W, v.data_ptr(), K * D, tokens, K * D, nullptr,
                                 stream()),
                 "copy_rows");
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["publish_fp8_amax"] = publish_fp8_amax;
    l.save(ctx);
    return {q, k, v};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const QkvLayout l = QkvLayout::load(ctx);
    const int64_t H = l.H, K = l.K, W = l.W, D = l.D, tokens = l.tokens;
    const torch::Tensor& any = grads[0].defined() ? grads[0] : grads[1].defined() ? grads[1] : grads[2];
    torch::Tensor dqkv = torch::empty(l.qkv_sizes, any.options());
    // The three pieces fold their maxima into one (zeroed here: the kernels do not).
    const torch::Tensor amax = ctx->saved_data["publish_fp8_amax"].toBool()
                                   ? torch::zeros({}, any.options().dtype(torch::kFloat32))
                                   : torch::Tensor();
    const int64_t es = dqkv.element_size();
    char* base = static_cast<char*>(dqkv.data_ptr());
    const auto rotate_back = [&](const torch::Tensor& g, int64_t offset, int64_t heads) {
      if (!g.defined()) {
        dqkv.narrow(-1, offset, heads * D).zero_();
        return;
      }
      const torch::Tensor gc = g.contiguous();
      check_launch(cuda::rotary(to_cuda(gc), gc.data_ptr(), heads * D, s[0].data_ptr<float>(), s[1].data_ptr<float>(),
                                base + offset * es, W, tokens, heads, D, true, ptr(amax), stream()),
                   "rotary");
    };
    rotate_back(grads[0], 0, H);
    rotate_back(grads[1], H * D, K);
    if (grads[2].defined()) {
      const torch::Tensor gv = grads[2].contiguous();
      LOOM_ASSERT(gv.scalar_type() == dqkv.scalar_type(), "QKV rotary backward: v's gradient is ", gv.scalar_type(),
                  ", q's and k's ", dqkv.scalar_type());
      check_launch(cuda::copy_rows(to_cuda(gv), gv.data_ptr(), K * D, base + (H + K) * D * es, W, tokens, K * D,
                                   ptr(amax), stream()),
                   "copy_rows");
    } else {
      dqkv.narrow(-1, (H + K) * D, K * D).zero_();
    }
    publish(dqkv, amax);
    return {dqkv, {}, {}, {}, {}, {}};
  }
};

class SwiGLUFn : public torch::autograd::Function<SwiGLUFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a_in, const torch::Tensor& b_in,
                               bool publish_fp8_amax) {
    const torch::Tensor a = a_in.contiguous(), b = b_in.contiguous();
    torch::Tensor y = torch::empty_like(a);
    const torch::Tensor amax = amax_for(publish_fp8_amax, a);
    check_launch(cuda::swiglu_forward(to_cuda(a), a.data_ptr(), b.data_ptr(), a.numel(), y.data_ptr(), 1, a.numel(),
                                      ptr(amax), stream()),
                 "swiglu_forward");
    publish(y, amax);
    ctx->save_for_backward({a, b});
    ctx->saved_data["publish_fp8_amax"] = publish_fp8_amax;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor dy = grads[0].contiguous();
    torch::Tensor da = torch::empty_like(s[0]), db = torch::empty_like(s[1]);
    const bool wanted = ctx->saved_data["publish_fp8_amax"].toBool();
    const torch::Tensor amax_da = amax_for(wanted, da), amax_db = amax_for(wanted, db);
    const int64_t n = s[0].numel();
    check_launch(cuda::swiglu_backward(to_cuda(s[0]), dy.data_ptr(), s[0].data_ptr(), s[1].data_ptr(), n, da.data_ptr(),
                                       db.data_ptr(), n, 1, n, ptr(amax_da), ptr(amax_db), stream()),
                 "swiglu_backward");
    publish(da, amax_da);
    publish(db, amax_db);
    return {da, db, {}};
  }
};

// [a; b] as one [rows_a + rows_b, cols] tensor: a view when b's storage continues a's (the model
// allocates w1 and w2 so), else a copy.
torch::Tensor stacked_rows(const torch::Tensor& a, const torch::Tensor& b) {
  const bool adjacent = a.is_contiguous() && b.is_contiguous() && a.dim() == 2 && b.dim() == 2 &&
                        a.size(1) == b.size(1) && a.scalar_type() == b.scalar_type() &&
                        a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl() &&
                        b.storage_offset() == a.storage_offset() + a.numel();
  if (adjacent) return a.detach().as_strided({a.size(0) + b.size(0), a.size(1)}, {a.size(1), 1});
  return torch::cat({a.detach(), b.detach()});
}

// silu(x w1^T) * (x w2^T): one GEMM of x against [w1; w2] into h [N, 2F], the gate over h's two
// halves; the backward writes both halves' gradients into one dh [N, 2F] for one GEMM to dx and
// one to [dw1; dw2].
class GatedProjectionFn : public torch::autograd::Function<GatedProjectionFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w1,
                               const torch::Tensor& w2) {
    const int64_t C = x.size(-1), F = w1.size(0);
    const torch::Tensor x2 = x.reshape({-1, C}).contiguous();
    const int64_t N = x2.size(0);
    const torch::Tensor h = torch::mm(x2, stacked_rows(w1, w2).t());  // [N, 2F]
    std::vector<int64_t> out(x.sizes().begin(), x.sizes().end());
    out.back() = F;
    torch::Tensor y = torch::empty(out, x.options());
    const int64_t es = h.element_size();
    check_launch(cuda::swiglu_forward(to_cuda(h), h.data_ptr(), static_cast<char*>(h.data_ptr()) + F * es, 2 * F,
                                      y.data_ptr(), N, F, nullptr, stream()),
                 "swiglu_forward");
    ctx->save_for_backward({x2, h, w1, w2});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &x2 = s[0], &h = s[1], &w1 = s[2], &w2 = s[3];
    const int64_t N = h.size(0), F = h.size(1) / 2;
    const torch::Tensor dy = grads[0].reshape({N, F}).contiguous();
    torch::Tensor dh = torch::empty_like(h);
    const int64_t es = h.element_size();
    check_launch(cuda::swiglu_backward(to_cuda(h), dy.data_ptr(), h.data_ptr(), static_cast<char*>(h.data_ptr()) + F * es,
                                       2 * F, dh.data_ptr(), static_cast<char*>(dh.data_ptr()) + F * es, 2 * F, N, F,
                                       nullptr, nullptr, stream()),
                 "swiglu_backward");
    const torch::Tensor dx = torch::mm(dh, stacked_rows(w1, w2)).view(ctx->saved_data["x_sizes"].toIntVector());
    if (!adds_into_grad(w1) && !adds_into_grad(w2)) {
      const torch::Tensor dw = torch::mm(dh.t(), x2);  // [2F, C]: both in one GEMM
      return {dx, dw.narrow(0, 0, F), dw.narrow(0, F, F)};
    }
    // Later micro-batches: each weight's gradient added in its own GEMM (weight_grad.h).
    variable_list out{dx};
    for (int64_t i = 0; i < 2; ++i) {
      const torch::Tensor dhi = dh.narrow(1, i * F, F);
      out.push_back(weight_gradient(i == 0 ? w1 : w2, [&](torch::Tensor g, bool add) {
        if (add)
          g.addmm_(dhi.t(), x2);
        else
          torch::mm_out(g, dhi.t(), x2);
      }));
    }
    return out;
  }
};

bool embedding_grad_applies(const torch::Tensor& weight, const torch::Tensor& dy) {
  return weight.is_cuda() && weight.scalar_type() == torch::kBFloat16 && dy.scalar_type() == torch::kBFloat16 &&
         weight.size(1) % 8 == 0 && adds_into_grad(weight) && aligned(weight.grad()) && aligned(dy);
}

class EmbeddingFn : public torch::autograd::Function<EmbeddingFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& weight, const torch::Tensor& ids) {
    ctx->save_for_backward({weight, ids});  // the leaf: its gradient is looked up in backward
    return torch::embedding(weight, ids);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &weight = saved[0], &ids = saved[1];
    const int64_t V = weight.size(0), C = weight.size(1);
    const torch::Tensor dy = grads[0].reshape({-1, C}).contiguous();
    if (!embedding_grad_applies(weight, dy))
      return {torch::embedding_dense_backward(dy, ids.reshape({-1}), V, /*padding_idx=*/-1,
                                              /*scale_grad_by_freq=*/false),
              torch::Tensor()};
    const auto [sorted, order] = ids.reshape({-1}).to(torch::kLong).sort(c10::optional<bool>(true), /*dim=*/0, false);
    check_launch(cuda::embedding_grad_add_bf16(sorted.data_ptr<int64_t>(), order.data_ptr<int64_t>(), dy.data_ptr(),
                                               weight.grad().data_ptr(), dy.size(0), C, stream()),
                 "embedding_grad_add_bf16");
    return {torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace
#endif

torch::Tensor fused_embedding(const torch::Tensor& weight, const torch::Tensor& ids) {
  LOOM_ASSERT(weight.dim() == 2, "fused_embedding: weight ", weight.sizes());
#ifdef LOOM_CUDA_KERNELS
  if (weight.is_cuda() && weight.requires_grad() && torch::GradMode::is_enabled()) return EmbeddingFn::apply(weight, ids);
#endif
  return torch::embedding(weight, ids);
}

torch::Tensor fused_rmsnorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, bool publish_fp8_amax) {
  LOOM_CHECK(weight.dim() == 1 && x.size(-1) == weight.size(0), "RMSNorm weight ", weight.sizes(),
             " does not match input ", x.sizes());
#ifdef LOOM_CUDA_KERNELS
  const int64_t C = x.size(-1);
  if (x.is_cuda() && kernel_dtype(x) && weight.scalar_type() == x.scalar_type() && C % 8 == 0 && C <= 12288 &&
      x.numel() > 0) {
    return RMSNormFn::apply(x, weight, eps, publish_fp8_amax);
  }
#endif
  if (cpu_fused_applies(x) && cpu_fused_applies(weight)) return cpu::rmsnorm(x, weight, eps);
  (void)publish_fp8_amax;  // nothing to publish: no FP8 matmul reads a CPU tensor
  return rmsnorm_reference(x, weight, eps);
}

bool fused_residual_rmsnorm_applies(const torch::Tensor& x, const torch::Tensor& weight) {
#ifdef LOOM_CUDA_KERNELS
  const int64_t C = x.size(-1);
  return x.is_cuda() && kernel_dtype(x) && weight.scalar_type() == x.scalar_type() && weight.dim() == 1 &&
         weight.size(0) == C && C % 8 == 0 && C <= 12288 && x.numel() > 0;
#else
  (void)x, (void)weight;
  return false;
#endif
}

std::vector<torch::Tensor> fused_residual_rmsnorm(const torch::Tensor& x, const torch::Tensor& r,
                                                  const torch::Tensor& weight, double eps, bool publish_fp8_amax) {
  LOOM_ASSERT(fused_residual_rmsnorm_applies(x, weight) && (!r.defined() || (r.sizes() == x.sizes() &&
                                                                               r.scalar_type() == x.scalar_type())),
              "fused_residual_rmsnorm on ", x.sizes(), " ", x.scalar_type(), " ", x.device(), " with weight ",
              weight.sizes(), " ", weight.scalar_type());
#ifdef LOOM_CUDA_KERNELS
  return r.defined() ? AddRMSNormFn::apply(x, r, weight, eps, publish_fp8_amax)
                     : ResidualRMSNormFn::apply(x, weight, eps, publish_fp8_amax);
#else
  (void)eps, (void)publish_fp8_amax;
  return {};
#endif
}

bool fused_gated_projection_applies(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2) {
#ifdef LOOM_CUDA_KERNELS
  return x.is_cuda() && kernel_dtype(x) && x.dim() >= 2 && x.numel() > 0 && w1.dim() == 2 &&
         w1.sizes() == w2.sizes() && w1.size(1) == x.size(-1) && w1.scalar_type() == x.scalar_type() &&
         w2.scalar_type() == x.scalar_type();
#else
  (void)x, (void)w1, (void)w2;
  return false;
#endif
}

torch::Tensor fused_gated_projection(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2) {
  LOOM_ASSERT(fused_gated_projection_applies(x, w1, w2), "fused_gated_projection on ", x.sizes(), " ",
              x.scalar_type(), " ", x.device(), " with weights ", w1.sizes(), ", ", w2.sizes());
#ifdef LOOM_CUDA_KERNELS
  return GatedProjectionFn::apply(x, w1, w2);
#else
  return {};
#endif
}

torch::Tensor fused_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  LOOM_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0 && cos.size(-1) == x.size(-1) / 2 && sin.sizes() == cos.sizes() &&
                 cos.numel() * 2 * x.size(-2) == x.numel(),
             "rotary needs x [..., N, D] with even D and cos/sin [..., D/2] with x's leading dims, got ", x.sizes(),
             ", ", cos.sizes(), ", ", sin.sizes());
#ifdef LOOM_CUDA_KERNELS
  if (x.is_cuda() && kernel_dtype(x) && cos.scalar_type() == torch::kFloat32 && sin.scalar_type() == torch::kFloat32) {
    return RotaryFn::apply(x, cos.contiguous(), sin.contiguous());
  }
#endif
  return rotary_reference(x, cos, sin);
}

void copy_token_rows(const torch::Tensor& src, const torch::Tensor& dst) {
  LOOM_ASSERT(src.sizes() == dst.sizes() && src.scalar_type() == dst.scalar_type(), "copy_token_rows of ",
              src.sizes(), " ", src.scalar_type(), " into ", dst.sizes(), " ", dst.scalar_type());
#ifdef LOOM_CUDA_KERNELS
  const auto rows_contiguous = [](const torch::Tensor& t) { return t.dim() >= 1 && t.select(0, 0).is_contiguous(); };
  if (src.is_cuda() && dst.device() == src.device() && kernel_dtype(src) && src.numel() > 0 &&
      rows_contiguous(src) && rows_contiguous(dst)) {
    const int64_t tokens = src.size(0);
    check_launch(cuda::copy_rows(to_cuda(src), src.data_ptr(), src.stride(0), dst.data_ptr(), dst.stride(0), tokens,
                                 src.numel() / tokens, nullptr, stream()),
                 "copy_rows");
    return;
  }
#endif
  dst.copy_(src);
}

bool fused_qkv_rotary_applies(const torch::Tensor& qkv) {
  // The CPU kernel makes qkv contiguous itself (a no-op for the projection's output).
  if (cpu_fused_applies(qkv)) return qkv.dim() >= 2 && qkv.numel() > 0;
#ifdef LOOM_CUDA_KERNELS
  return qkv.is_cuda() && kernel_dtype(qkv) && qkv.is_contiguous() && qkv.dim() >= 2 && qkv.numel() > 0;
#else
  return false;
#endif
}

std::vector<torch::Tensor> fused_qkv_rotary(const torch::Tensor& qkv, int64_t H, int64_t K, const torch::Tensor& cos,
                                            const torch::Tensor& sin, bool publish_fp8_amax) {
  LOOM_CHECK(H > 0 && K > 0 && qkv.dim() >= 2 && qkv.size(-1) % (H + 2 * K) == 0 &&
                 (qkv.size(-1) / (H + 2 * K)) % 2 == 0,
             "fused QKV needs qkv [..., (H + 2K) D] with even D, got ", qkv.sizes(), " for H = ", H, ", K = ", K);
  const int64_t D = qkv.size(-1) / (H + 2 * K);
  LOOM_CHECK(cos.size(-1) == D / 2 && sin.sizes() == cos.sizes() && cos.numel() * 2 * (H + 2 * K) == qkv.numel(),
             "fused QKV needs cos/sin [..., D/2] with qkv's leading dims, got ", cos.sizes(), ", ", sin.sizes(),
             " for qkv ", qkv.sizes());
  LOOM_ASSERT(fused_qkv_rotary_applies(qkv), "fused_qkv_rotary on ", qkv.sizes(), " ", qkv.scalar_type(), " ",
              qkv.device());
  if (qkv.is_cpu()) return cpu::qkv_rotary(qkv, H, K, cos, sin);
#ifdef LOOM_CUDA_KERNELS
  return QkvRotaryFn::apply(qkv, cos.to(torch::kFloat32).contiguous(), sin.to(torch::kFloat32).contiguous(), H, K,
                            publish_fp8_amax);
#else
  (void)publish_fp8_amax;
  LOOM_ASSERT(false, "fused_qkv_rotary: no kernel for ", qkv.device());
  return {};
#endif
}

torch::Tensor fused_swiglu(const torch::Tensor& a, const torch::Tensor& b, bool publish_fp8_amax) {
  LOOM_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(), "SwiGLU needs a and b of one shape and dtype, got ",
             a.sizes(), " ", a.scalar_type(), " and ", b.sizes(), " ", b.scalar_type());
#ifdef LOOM_CUDA_KERNELS
  if (a.is_cuda() && kernel_dtype(a)) return SwiGLUFn::apply(a, b, publish_fp8_amax);
#endif
  (void)publish_fp8_amax;  // nothing to publish: no FP8 matmul reads a CPU tensor
  if (cpu_fused_applies(a) && cpu_fused_applies(b)) return cpu::swiglu(a, b);
  return swiglu_reference(a, b);
}

bool fused_scale_add_applies(const torch::Tensor& out, const torch::Tensor& x, const torch::Tensor& scale) {
#ifdef LOOM_CUDA_KERNELS
  return out.is_cuda() && out.scalar_type() == torch::kBFloat16 && x.scalar_type() == torch::kBFloat16 &&
         out.sizes() == x.sizes() && out.device() == x.device() && out.is_contiguous() && x.is_contiguous() &&
         scale.numel() == 1 && scale.scalar_type() == torch::kFloat32 && scale.device() == out.device();
#else
  (void)out, (void)x, (void)scale;
  return false;
#endif
}

void fused_scale_add_(torch::Tensor out, const torch::Tensor& x, const torch::Tensor& scale, bool accumulate) {
  LOOM_ASSERT(fused_scale_add_applies(out, x, scale), "fused_scale_add_ on ", out.sizes(), " ", out.scalar_type(),
              " and ", x.sizes(), " ", x.scalar_type());
#ifdef LOOM_CUDA_KERNELS
  check_launch(cuda::scale_add_bf16(x.data_ptr(), scale.data_ptr<float>(), out.data_ptr(), out.numel(), accumulate,
                                    stream()),
               "scale_add_bf16");
#else
  (void)accumulate;
#endif
}

bool fused_cross_entropy_applies(const torch::Tensor& logits) {
#ifdef LOOM_CUDA_KERNELS
  return logits.is_cuda() && logits.scalar_type() == torch::kBFloat16 && logits.dim() == 2 && logits.is_contiguous() &&
         logits.size(1) % 8 == 0;
#else
  (void)logits;
  return false;
#endif
}

void fused_cross_entropy_(torch::Tensor& logits, const torch::Tensor& labels, int64_t ignore_index, double eps,
                          double grad_scale, torch::Tensor loss, torch::Tensor lse, torch::Tensor correct) {
  LOOM_ASSERT(fused_cross_entropy_applies(logits), "fused_cross_entropy_ on ", logits.sizes(), " ",
              logits.scalar_type(), " ", logits.device());
#ifdef LOOM_CUDA_KERNELS
  const int64_t n = logits.size(0);
  LOOM_ASSERT(labels.numel() == n && loss.numel() == n && lse.numel() == n && correct.numel() == n &&
                  labels.scalar_type() == torch::kLong && loss.scalar_type() == torch::kFloat32 &&
                  lse.scalar_type() == torch::kFloat32 && correct.scalar_type() == torch::kBool &&
                  labels.is_contiguous() && loss.is_contiguous() && lse.is_contiguous() && correct.is_contiguous(),
              "fused_cross_entropy_: bad outputs for ", n, " rows");
  check_launch(cuda::cross_entropy_bf16(logits.data_ptr(), n, logits.size(1), labels.data_ptr<int64_t>(), ignore_index,
                                        static_cast<float>(eps), static_cast<float>(grad_scale), loss.data_ptr<float>(),
                                        lse.data_ptr<float>(), correct.data_ptr<bool>(), stream()),
               "cross_entropy_bf16");
#else
  (void)labels, (void)ignore_index, (void)eps, (void)grad_scale, (void)loss, (void)lse, (void)correct;
#endif
}

void fused_bias_grad(torch::Tensor out, const torch::Tensor& dy, bool add) {
  LOOM_ASSERT(dy.dim() == 2 && out.dim() == 1 && out.size(0) == dy.size(1) && out.is_contiguous(),
              "fused_bias_grad: out ", out.sizes(), ", dy ", dy.sizes());
#ifdef LOOM_CUDA_KERNELS
  if (dy.is_cuda() && dy.scalar_type() == torch::kBFloat16 && out.scalar_type() == torch::kBFloat16 &&
      out.device() == dy.device() && dy.is_contiguous() && dy.size(1) % 8 == 0 && aligned(dy)) {
    const torch::Tensor partial =
        torch::empty({cuda::column_sum_partials(dy.size(0), dy.size(1))}, dy.options().dtype(torch::kFloat32));
    check_launch(cuda::column_sum_bf16(dy.data_ptr(), dy.size(0), dy.size(1), partial.data_ptr<float>(),
                                       out.data_ptr(), add, stream()),
                 "column_sum_bf16");
    return;
  }
#endif
  // fp32 sums (float64 for float64), added in that precision: one rounding into out.
  const torch::Dtype acc = at::promote_types(dy.scalar_type(), torch::kFloat32);
  if (!add && out.scalar_type() == acc && dy.scalar_type() == acc) {
    torch::sum_out(out, dy, {0});  // nothing to round: written in place
    return;
  }
  const torch::Tensor sum = dy.sum(0, /*keepdim=*/false, acc);
  if (add)
    out.add_(sum);
  else
    out.copy_(sum);
}

}  // namespace loom
