// Fused RMSNorm forward and backward: one pass over each row in place of LibTorch's chain of
// fp32 casts, pow, mean, rsqrt and products (each a full read and write of the activations).
// A block owns a row (forward; read twice, the second read hits L1/L2) or a strided set of rows
// (backward: each read once, the weight's gradient summed per block in shared memory, then over
// the blocks in order by sum_partials).
#include <algorithm>

#include "common.cuh"

namespace loom::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int kThreads = 256;

// 16-byte vector loads and stores of N = 16 / sizeof(T) elements, converted to fp32.
template <typename T>
struct Vec {
  static constexpr int N = 16 / sizeof(T);
  __device__ __forceinline__ static void unpack(const uint4& raw, float (&out)[N]) {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_f32(e[i]);
  }
  __device__ __forceinline__ static void load(const T* p, float (&out)[N]) {
    unpack(*reinterpret_cast<const uint4*>(p), out);
  }
  __device__ __forceinline__ static void store(T* p, const float (&in)[N]) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < N; ++i) e[i] = from_f32<T>(in[i]);
    *reinterpret_cast<uint4*>(p) = raw;
  }
};

// With a residual r: the row is h = x + r, rounded to T and stored (the residual stream), then
// normalized as stored; the second pass reads h back from the cache.
template <typename T>
__global__ void __launch_bounds__(kThreads) rmsnorm_fwd(const T* __restrict__ x, const T* __restrict__ r,
                                                        const T* __restrict__ w, T* __restrict__ y, T* __restrict__ h,
                                                        float* __restrict__ rstd, int64_t C, float eps,
                                                        float* __restrict__ amax) {
  using V = Vec<T>;
  constexpr int N = V::N;
  const T* xr = x + blockIdx.x * C;
  T* yr = y + blockIdx.x * C;
  float ss = 0;
  for (int64_t c = threadIdx.x * N; c < C; c += kThreads * N) {
    float v[N];
    V::load(xr + c, v);
    if (r != nullptr) {
      float rv[N];
      V::load(r + blockIdx.x * C + c, rv);
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = to_f32(from_f32<T>(v[i] + rv[i]));
      V::store(h + blockIdx.x * C + c, v);
    }
#pragma unroll
    for (int i = 0; i < N; ++i) ss += v[i] * v[i];
  }
  const float rs = rsqrtf(detail::block_sum<kThreads>(ss) / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
  if (r != nullptr) xr = h + blockIdx.x * C;  // this thread's own stores
  float m = 0;  // the largest |y| this thread stored
  for (int64_t c = threadIdx.x * N; c < C; c += kThreads * N) {
    float v[N], wv[N];
    V::load(xr + c, v);
    V::load(w + c, wv);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      v[i] = v[i] * rs * wv[i];
      if (amax != nullptr) m = fmaxf(m, detail::stored_abs<T>(v[i]));
    }
    V::store(yr + c, v);
  }
  if (amax != nullptr) detail::block_max_into(m, amax);
}

// dx = r * (g - xh * mean(g * xh)) (+ dres) with xh = x * r, g = dy * w;  dw += dy * xh.
// A thread owns the same VPT vectors of every row (vector k at column (threadIdx.x + k kThreads) N):
// its part of dw is summed in shared memory no other thread touches, and its part of a row stays
// in registers between the row's reduction and its output, so x, dy and dres are read once (the
// kernel this replaced read x and dy again after the reduction and dres only then, one row at a
// time: 1.41x one pass's bound in a 1b step on an H200). Where a thread's share is one vector, two
// rows are in flight, their loads issued before either reduces. Rows go to blocks as row b,
// b + grid, ..., and each block sums its rows in that order.
template <typename T, int VPT>
__global__ void __launch_bounds__(kThreads, VPT <= 4 ? 4 : (VPT <= 8 ? 2 : 1))
    rmsnorm_bwd(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                const float* __restrict__ rstd, const T* __restrict__ dres, T* __restrict__ dx,
                float* __restrict__ dw_partial, int64_t rows, int64_t C) {
  using V = Vec<T>;
  constexpr int N = V::N;
  constexpr int R = VPT == 1 ? 2 : 1;
  extern __shared__ float dw[];  // [C]
  const auto column = [](int k) { return (static_cast<int64_t>(threadIdx.x) + k * kThreads) * N; };
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    if (column(k) >= C) break;
#pragma unroll
    for (int i = 0; i < N; ++i) dw[column(k) + i] = 0;
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t first = blockIdx.x; first < rows; first += R * static_cast<int64_t>(gridDim.x)) {
    uint4 xr[R][VPT], gr[R][VPT], rr[R][VPT];
    float r[R], dot[R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int64_t row = first + j * static_cast<int64_t>(gridDim.x);
      const bool live = row < rows;
      r[j] = live ? rstd[row] : 0.0f;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const bool mine = live && column(k) < C;
        xr[j][k] = mine ? *reinterpret_cast<const uint4*>(x + row * C + column(k)) : zero;
        gr[j][k] = mine ? *reinterpret_cast<const uint4*>(dy + row * C + column(k)) : zero;
        rr[j][k] = mine && dres != nullptr ? *reinterpret_cast<const uint4*>(dres + row * C + column(k)) : zero;
      }
    }
#pragma unroll
    for (int j = 0; j < R; ++j) {
      dot[j] = 0;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        if (column(k) >= C) break;
        float xv[N], gv[N], wv[N];
        V::unpack(xr[j][k], xv);
        V::unpack(gr[j][k], gv);
        V::load(w + column(k), wv);
#pragma unroll
        for (int i = 0; i < N; ++i) dot[j] += gv[i] * wv[i] * xv[i] * r[j];
      }
    }
    float mean_dot[R];
#pragma unroll
    for (int j = 0; j < R; ++j) mean_dot[j] = detail::block_sum<kThreads>(dot[j]) / static_cast<float>(C);
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int64_t row = first + j * static_cast<int64_t>(gridDim.x);
      if (row >= rows) break;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        if (column(k) >= C) break;
        float xv[N], gv[N], wv[N], out[N];
        V::unpack(xr[j][k], xv);
        V::unpack(gr[j][k], gv);
        V::load(w + column(k), wv);
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const float xh = xv[i] * r[j];
          out[i] = r[j] * (gv[i] * wv[i] - xh * mean_dot[j]);
          dw[column(k) + i] += gv[i] * xh;
        }
        if (dres != nullptr) {
          float rv[N];
          V::unpack(rr[j][k], rv);
#pragma unroll
          for (int i = 0; i < N; ++i) out[i] += rv[i];
        }
        V::store(dx + row * C + column(k), out);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    if (column(k) >= C) break;
#pragma unroll
    for (int i = 0; i < N; ++i) dw_partial[blockIdx.x * C + column(k) + i] = dw[column(k) + i];
  }
}

}  // namespace

const char* rmsnorm_forward(Dtype dtype, const void* x, const void* r, const void* w, void* y, void* h, float* rstd,
                            int64_t rows, int64_t C, float eps, float* amax, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (const char* e = detail::zero_maxima(s, amax)) return e;
  if (rows == 0) return nullptr;
  LOOM_CUDA_DISPATCH(dtype, rmsnorm_fwd<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
                                static_cast<const T*>(x), static_cast<const T*>(r), static_cast<const T*>(w),
                                static_cast<T*>(y), static_cast<T*>(h), rstd, C, eps, amax));
  return detail::launch_error();
}

int64_t rmsnorm_backward_blocks(int64_t rows) {
  int device = 0, sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  // Four blocks an SM (rows of up to 4 vectors a thread, C <= 4096 in bf16): twice the loads in
  // flight that two gave.
  return std::max<int64_t>(1, std::min<int64_t>(rows, 4 * sms));
}

const char* rmsnorm_backward(Dtype dtype, const void* dy, const void* x, const void* w, const float* rstd,
                             const void* dres, void* dx, float* dw_partial, void* dw, int64_t rows, int64_t C,
                             void* stream) {
  if (rows == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t blocks = rmsnorm_backward_blocks(rows);
  const int64_t vectors = C / (dtype == Dtype::kBFloat16 ? 8 : 4);
  const int64_t per_thread = (vectors + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks);
  if (C > 12288) return "rmsnorm_backward: C over 12288";
  const size_t shared = static_cast<size_t>(C) * sizeof(float);
  // C = 12288's 48 KB and block_sum's few bytes pass the default limit: allowed for the widest C
  // there is, one value whoever sets it.
  constexpr int kMostShared = 12288 * sizeof(float) + 1024;
#define LOOM_RMSNORM_BWD(VPT)                                                                              \
  if (shared + 1024 > 48 * 1024) {                                                                         \
    const cudaError_t e =                                                                                  \
        cudaFuncSetAttribute(rmsnorm_bwd<T, VPT>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMostShared); \
    if (e != cudaSuccess) return cudaGetErrorString(e);                                                    \
  }                                                                                                        \
  rmsnorm_bwd<T, VPT><<<grid, kThreads, shared, s>>>(static_cast<const T*>(dy), static_cast<const T*>(x),    \
                                                 static_cast<const T*>(w), rstd, static_cast<const T*>(dres), \
                                                 static_cast<T*>(dx), dw_partial, rows, C)
  LOOM_CUDA_DISPATCH(dtype, {
    if (per_thread <= 1) {
      LOOM_RMSNORM_BWD(1);
    } else if (per_thread <= 2) {
      LOOM_RMSNORM_BWD(2);
    } else if (per_thread <= 4) {
      LOOM_RMSNORM_BWD(4);
    } else if (per_thread <= 8) {
      LOOM_RMSNORM_BWD(8);
    } else if (per_thread <= 12) {
      LOOM_RMSNORM_BWD(12);
    } else {
      return "rmsnorm_backward: rows wider than 12 vectors a thread";
    }
  });
#undef LOOM_RMSNORM_BWD
  if (const char* e = detail::launch_error()) return e;
  return sum_partials(dtype, dw_partial, blocks, C, dw, false, stream);
}

}  // namespace loom::cuda
