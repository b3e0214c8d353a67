#include "cpu_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "loom/error.h"
#include "qkv_layout.h"

namespace loom::cpu {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x86-64: each loop kernel also gets a copy compiled for AVX2, picked at load time (an ifunc) on
// CPUs that have it; the build's baseline is SSE2, and the SwiGLU gate is compute-bound (2x).
// AVX2 alone, not AVX-512 or FMA: GCC would contract a * b + c into an FMA there, and the results
// would differ from the baseline copy's. Without FMA both copies give bitwise the same results.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LOOM_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LOOM_SIMD_CLONES
#endif

// Elements a parallel task covers at least: below this, waking a second thread costs more than
// the work it takes over.
constexpr int64_t kGrainElements = 1 << 14;

// Rows (or tokens) per parallel task for rows of row_elements each.
int64_t grain(int64_t row_elements) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, row_elements));
}

// Row sums use 8 independent accumulators: one accumulator is a serial chain the compiler may not
// reorder (no -ffast-math), 8 map onto SIMD lanes. Fixed lanes, fixed order, fixed bits.
constexpr int64_t kLanes = 8;

float sum_lanes(const float (&acc)[kLanes]) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// sum_c a[c] * b[c]
inline float dot(const float* __restrict__ a, const float* __restrict__ b, int64_t n) {
  float acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += a[c + j] * b[c + j];
  }
  float s = sum_lanes(acc);
  for (; c < n; ++c) s += a[c] * b[c];
  return s;
}

// sum_c a[c] * b[c] * m[c]
inline float dot3(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ m,
                  int64_t n) {
  float acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += a[c + j] * b[c + j] * m[c + j];
  }
  float s = sum_lanes(acc);
  for (; c < n; ++c) s += a[c] * b[c] * m[c];
  return s;
}

// The SwiGLU loops call no libm function and take no branch on a float, so they vectorise: glibc's
// expf is scalar, and GCC (with its default -ftrapping-math) keeps a float clamp as a branch.

// exp(x) for x in [-87, 0]: 2^n exp(r), n = round(x / ln2), r = x - n ln2 (ln2 split in two,
// Cody-Waite), exp(r) by Cephes' expf polynomial; about 1 ulp. 2^n stays a normal float.
inline float exp_nonpositive(float x) {
  // Adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits of t.
  constexpr float kRound = 12582912.0f;
  constexpr uint32_t kRoundBits = 0x4B400000u;
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  uint32_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits - kRoundBits + 127u) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// sigmoid(a) from e = exp(-|a|) <= 1, which cannot overflow: 1 / (1 + e) for a >= 0, e / (1 + e)
// below (no cancellation in 1 - s). |a| is clamped to 87 on its bits (an integer min), so
// sigmoid(-|a|) bottoms out at ~1e-38 instead of 0, and a NaN gives a finite s: the callers
// multiply by a, which brings the NaN back.
inline float sigmoid(float a) {
  constexpr uint32_t k87 = 0x42AE0000u;  // 87.0f
  uint32_t ab;
  std::memcpy(&ab, &a, sizeof ab);
  uint32_t mag = ab & 0x7FFFFFFFu;
  mag = mag < k87 ? mag : k87;
  float x;
  std::memcpy(&x, &mag, sizeof x);
  const float e = exp_nonpositive(-x);
  const float pos = 1.0f / (1.0f + e), neg = e * pos;
  uint32_t pb, nb;
  std::memcpy(&pb, &pos, sizeof pb);
  std::memcpy(&nb, &neg, sizeof nb);
  const uint32_t is_neg = 0u - (ab >> 31);  // all ones where a's sign bit is set
  const uint32_t sb = (pb & ~is_neg) | (nb & is_neg);
  float s;
  std::memcpy(&s, &sb, sizeof s);
  return s;
}

// ---- RMSNorm ----

LOOM_SIMD_CLONES void rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                   float* __restrict__ rstd, int64_t begin, int64_t end, int64_t C, double eps) {
  for (int64_t row = begin; row < end; ++row) {
    const float* xr = x + row * C;
    float* yr = y + row * C;
    // The row's scale in double: one per row, and as close to the float64 reference as fp32 sums allow.
    const float rs = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dot(xr, xr, C)) / C + eps));
    rstd[row] = rs;
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rs * w[c];
  }
}

// dx of rows [begin, end) and their dw contribution added to dw_acc.
LOOM_SIMD_CLONES void rmsnorm_backward_rows(const float* __restrict__ dy, const float* __restrict__ x,
                                            const float* __restrict__ w, const float* __restrict__ rstd,
                                            float* __restrict__ dx, float* __restrict__ dw_acc, int64_t begin,
                                            int64_t end, int64_t C) {
  for (int64_t row = begin; row < end; ++row) {
    const float *dyr = dy + row * C, *xr = x + row * C;
    float* dxr = dx + row * C;
    const float rs = rstd[row];
    const float m = dot3(dyr, w, xr, C) * rs / static_cast<float>(C);  // mean(g * xh)
    for (int64_t c = 0; c < C; ++c) {
      const float xh = xr[c] * rs;
      dxr[c] = rs * (dyr[c] * w[c] - xh * m);
      dw_acc[c] += dyr[c] * xh;
    }
  }
}

// Rows per chunk of dw's partial sums: a function of the row count alone (never of the thread
// count or timing), so dw's summation order and bits are fixed. At most ~128 partial rows.
int64_t dw_chunk_rows(int64_t rows) { return std::max<int64_t>(32, (rows + 127) / 128); }

class RMSNormFn : public torch::autograd::Function<RMSNormFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& w_in,
                               double eps) {
    const torch::Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const int64_t C = x.size(-1), rows = x.numel() / C;
    torch::Tensor y = torch::empty(x.sizes(), x.options());
    torch::Tensor rstd = torch::empty({rows}, x.options());
    const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
    float *yp = y.data_ptr<float>(), *rp = rstd.data_ptr<float>();
    at::parallel_for(0, rows, grain(C), [&](int64_t begin, int64_t end) {
      rmsnorm_rows(xp, wp, yp, rp, begin, end, C, eps);
    });
    ctx->save_for_backward({x, w, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &x = s[0], &w = s[1], &rstd = s[2];
    const torch::Tensor dy = grads[0].contiguous();
    const int64_t C = x.size(-1), rows = x.numel() / C;
    const int64_t chunk = dw_chunk_rows(rows), chunks = (rows + chunk - 1) / chunk;
    torch::Tensor dx = torch::empty(x.sizes(), x.options());
    torch::Tensor partial = torch::zeros({chunks, C}, x.options());
    const float *dyp = dy.data_ptr<float>(), *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
    const float* rp = rstd.data_ptr<float>();
    float *dxp = dx.data_ptr<float>(), *pp = partial.data_ptr<float>();
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        rmsnorm_backward_rows(dyp, xp, wp, rp, dxp, pp + i * C, i * chunk, std::min(rows, (i + 1) * chunk), C);
      }
    });
    torch::Tensor dw = torch::zeros({C}, x.options());
    float* dwp = dw.data_ptr<float>();
    for (int64_t i = 0; i < chunks; ++i) {
      const float* pr = pp + i * C;
      for (int64_t c = 0; c < C; ++c) dwp[c] += pr[c];
    }
    return {dx, dw, {}};
  }
};

// ---- SwiGLU ----

LOOM_SIMD_CLONES void swiglu_forward(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y,
                                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = a[i] * sigmoid(a[i]) * b[i];
  }
}

// silu'(a) = s (1 + a (1 - s)), s = sigmoid(a)
LOOM_SIMD_CLONES void swiglu_backward(const float* __restrict__ dy, const float* __restrict__ a,
                                      const float* __restrict__ b, float* __restrict__ da, float* __restrict__ db,
                                      int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(a[i]);
    da[i] = dy[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
    db[i] = dy[i] * a[i] * s;
  }
}

class SwiGLUFn : public torch::autograd::Function<SwiGLUFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a_in, const torch::Tensor& b_in) {
    const torch::Tensor a = a_in.contiguous(), b = b_in.contiguous();
    torch::Tensor y = torch::empty(a.sizes(), a.options());
    const float *ap = a.data_ptr<float>(), *bp = b.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, a.numel(), kGrainElements, [&](int64_t begin, int64_t end) {
      swiglu_forward(ap + begin, bp + begin, yp + begin, end - begin);
    });
    ctx->save_for_backward({a, b});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &a = s[0], &b = s[1];
    const torch::Tensor dy = grads[0].contiguous();
    torch::Tensor da = torch::empty(a.sizes(), a.options()), db = torch::empty(b.sizes(), b.options());
    const float *dyp = dy.data_ptr<float>(), *ap = a.data_ptr<float>(), *bp = b.data_ptr<float>();
    float *dap = da.data_ptr<float>(), *dbp = db.data_ptr<float>();
    at::parallel_for(0, a.numel(), kGrainElements, [&](int64_t begin, int64_t end) {
      swiglu_backward(dyp + begin, ap + begin, bp + begin, dap + begin, dbp + begin, end - begin);
    });
    return {da, db};
  }
};

// ---- QKV split and rotary ----

// One head of D = 2 * half: y_i = x_i c_i - x_{i+half} s_i, y_{i+half} = x_{i+half} c_i + x_i s_i;
// inverse (the backward: the transposed rotation) flips the sign of s.
inline void rotate_head(const float* __restrict__ x, const float* __restrict__ c, const float* __restrict__ s,
                        float* __restrict__ y, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half];
    y[i] = x1 * c[i] - x2 * s[i];
    y[i + half] = x2 * c[i] + x1 * s[i];
  }
}
inline void rotate_head_inverse(const float* __restrict__ x, const float* __restrict__ c,
                                const float* __restrict__ s, float* __restrict__ y, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half];
    y[i] = x1 * c[i] + x2 * s[i];
    y[i + half] = x2 * c[i] - x1 * s[i];
  }
}

// Tokens [begin, end) of qkv [tokens, (H + 2K) D]: q [tokens, H, D] and k [tokens, K, D] rotated,
// v [tokens, K, D] copied; cos, sin [tokens, D/2].
LOOM_SIMD_CLONES void qkv_rotary_tokens(const float* __restrict__ qkv, const float* __restrict__ cos,
                                        const float* __restrict__ sin, float* __restrict__ q, float* __restrict__ k,
                                        float* __restrict__ v, int64_t begin, int64_t end, int64_t H, int64_t K,
                                        int64_t D) {
  const int64_t W = (H + 2 * K) * D, half = D / 2;
  for (int64_t t = begin; t < end; ++t) {
    const float *x = qkv + t * W, *c = cos + t * half, *s = sin + t * half;
    for (int64_t n = 0; n < H; ++n) rotate_head(x + n * D, c, s, q + (t * H + n) * D, half);
    for (int64_t n = 0; n < K; ++n) rotate_head(x + (H + n) * D, c, s, k + (t * K + n) * D, half);
    std::memcpy(v + t * K * D, x + (H + K) * D, sizeof(float) * K * D);
  }
}

// The backward of qkv_rotary_tokens into dqkv [tokens, (H + 2K) D]; a null dq, dk or dv (an unused
// output) leaves its slice zero.
LOOM_SIMD_CLONES void qkv_rotary_backward_tokens(const float* __restrict__ dq, const float* __restrict__ dk,
                                                 const float* __restrict__ dv, const float* __restrict__ cos,
                                                 const float* __restrict__ sin, float* __restrict__ dqkv,
                                                 int64_t begin, int64_t end, int64_t H, int64_t K, int64_t D) {
  const int64_t W = (H + 2 * K) * D, half = D / 2;
  for (int64_t t = begin; t < end; ++t) {
    const float *c = cos + t * half, *s = sin + t * half;
    float* o = dqkv + t * W;
    if (dq != nullptr) {
      for (int64_t n = 0; n < H; ++n) rotate_head_inverse(dq + (t * H + n) * D, c, s, o + n * D, half);
    } else {
      std::fill(o, o + H * D, 0.0f);
    }
    if (dk != nullptr) {
      for (int64_t n = 0; n < K; ++n) rotate_head_inverse(dk + (t * K + n) * D, c, s, o + (H + n) * D, half);
    } else {
      std::fill(o + H * D, o + (H + K) * D, 0.0f);
    }
    if (dv != nullptr) {
      std::memcpy(o + (H + K) * D, dv + t * K * D, sizeof(float) * K * D);
    } else {
      std::fill(o + (H + K) * D, o + W, 0.0f);
    }
  }
}

class QkvRotaryFn : public torch::autograd::Function<QkvRotaryFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& qkv_in, const torch::Tensor& cos,
                               const torch::Tensor& sin, int64_t H, int64_t K) {
    const torch::Tensor qkv = qkv_in.contiguous();
    const QkvLayout l(qkv.sizes().vec(), H, K);
    torch::Tensor q = torch::empty(l.head_sizes(H), qkv.options()), k = torch::empty(l.head_sizes(K), qkv.options());
    torch::Tensor v = torch::empty(l.head_sizes(K), qkv.options());
    const float *xp = qkv.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
    float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
    at::parallel_for(0, l.tokens, grain(l.W), [&](int64_t begin, int64_t end) {
      qkv_rotary_tokens(xp, cp, sp, qp, kp, vp, begin, end, H, K, l.D);
    });
    ctx->save_for_backward({cos, sin});
    l.save(ctx);
    return {q, k, v};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const QkvLayout l = QkvLayout::load(ctx);
    // Autograd leaves the gradient of an unused output undefined: its slice of dqkv is zero.
    const torch::Tensor dq = grads[0].defined() ? grads[0].contiguous() : torch::Tensor();
    const torch::Tensor dk = grads[1].defined() ? grads[1].contiguous() : torch::Tensor();
    const torch::Tensor dv = grads[2].defined() ? grads[2].contiguous() : torch::Tensor();
    torch::Tensor dqkv = torch::empty(l.qkv_sizes, s[0].options());
    const float *cp = s[0].data_ptr<float>(), *sp = s[1].data_ptr<float>();
    const float* dqp = dq.defined() ? dq.data_ptr<float>() : nullptr;
    const float* dkp = dk.defined() ? dk.data_ptr<float>() : nullptr;
    const float* dvp = dv.defined() ? dv.data_ptr<float>() : nullptr;
    float* out = dqkv.data_ptr<float>();
    at::parallel_for(0, l.tokens, grain(l.W), [&](int64_t begin, int64_t end) {
      qkv_rotary_backward_tokens(dqp, dkp, dvp, cp, sp, out, begin, end, l.H, l.K, l.D);
    });
    return {dqkv, {}, {}, {}, {}};
  }
};

}  // namespace

bool kernels_apply(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32;
}

torch::Tensor rmsnorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  LOOM_CHECK(kernels_apply(x) && kernels_apply(weight), "CPU RMSNorm takes fp32 CPU tensors, got ", x.scalar_type(),
             " ", x.device(), " and ", weight.scalar_type(), " ", weight.device());
  LOOM_CHECK(x.dim() >= 1 && weight.dim() == 1 && x.size(-1) == weight.size(0) && x.size(-1) > 0,
             "RMSNorm weight ", weight.sizes(), " does not match input ", x.sizes());
  LOOM_CHECK(eps >= 0, "RMSNorm eps must be >= 0, got ", eps);
  return RMSNormFn::apply(x, weight, eps);
}

torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b) {
  LOOM_CHECK(kernels_apply(a) && kernels_apply(b) && a.sizes() == b.sizes(),
             "CPU SwiGLU takes fp32 CPU tensors of one shape, got ", a.sizes(), " ", a.scalar_type(), " ", a.device(),
             " and ", b.sizes(), " ", b.scalar_type(), " ", b.device());
  return SwiGLUFn::apply(a, b);
}

std::vector<torch::Tensor> qkv_rotary(const torch::Tensor& qkv, int64_t H, int64_t K, const torch::Tensor& cos,
                                      const torch::Tensor& sin) {
  LOOM_CHECK(kernels_apply(qkv) && cos.device().is_cpu() && sin.device().is_cpu(),
             "CPU QKV rotary takes fp32 CPU tensors, got qkv ", qkv.scalar_type(), " ", qkv.device(), ", cos/sin on ",
             cos.device(), ", ", sin.device());
  LOOM_CHECK(H > 0 && K > 0 && qkv.dim() >= 2 && qkv.size(-1) % (H + 2 * K) == 0 &&
                 (qkv.size(-1) / (H + 2 * K)) % 2 == 0,
             "QKV rotary needs qkv [..., (H + 2K) D] with even D, got ", qkv.sizes(), " for H = ", H, ", K = ", K);
  const int64_t D = qkv.size(-1) / (H + 2 * K);
  LOOM_CHECK(cos.size(-1) == D / 2 && sin.sizes() == cos.sizes() && cos.numel() * 2 * (H + 2 * K) == qkv.numel(),
             "QKV rotary needs cos/sin [..., D/2] with qkv's leading dims, got ", cos.sizes(), ", ", sin.sizes(),
             " for qkv ", qkv.sizes());
  return QkvRotaryFn::apply(qkv, cos.to(torch::kFloat32).contiguous(), sin.to(torch::kFloat32).contiguous(), H, K);
}

}  // namespace loom::cpu
