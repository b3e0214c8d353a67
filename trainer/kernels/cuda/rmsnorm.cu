// Fused RMSNorm forward and backward: one pass over each row in place of LibTorch's chain of
// fp32 casts, pow, mean, rsqrt and products (each a full read and write of the activations).
// A block owns a row (forward) or a strided set of rows (backward, accumulating the weight's
// gradient in shared memory). Rows are read twice; the second read hits L1/L2.
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
  __device__ __forceinline__ static void load(const T* p, float (&out)[N]) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_f32(e[i]);
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
template <typename T>
__global__ void __launch_bounds__(kThreads) rmsnorm_bwd(const T* __restrict__ dy, const T* __restrict__ x,
                                                        const T* __restrict__ w, const float* __restrict__ rstd,
                                                        const T* __restrict__ dres, T* __restrict__ dx,
                                                        float* __restrict__ dw_partial, int64_t rows, int64_t C) {
  using V = Vec<T>;
  constexpr int N = V::N;
  extern __shared__ float dw[];  // [C], each element owned by one thread (same columns every row)
  for (int64_t c = threadIdx.x * N; c < C; c += kThreads * N) {
#pragma unroll
    for (int i = 0; i < N; ++i) dw[c + i] = 0;
  }
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float r = rstd[row];
    const T* xr = x + row * C;
    const T* dyr = dy + row * C;
    float dot = 0;
    for (int64_t c = threadIdx.x * N; c < C; c += kThreads * N) {
      float xv[N], gv[N], wv[N];
      V::load(xr + c, xv);
      V::load(dyr + c, gv);
      V::load(w + c, wv);
#pragma unroll
      for (int i = 0; i < N; ++i) dot += gv[i] * wv[i] * xv[i] * r;
    }
    const float mean_dot = detail::block_sum<kThreads>(dot) / static_cast<float>(C);
    for (int64_t c = threadIdx.x * N; c < C; c += kThreads * N) {
      float xv[N], gv[N], wv[N], out[N];
      V::load(xr + c, xv);
      V::load(dyr + c, gv);
      V::load(w + c, wv);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float xh = xv[i] * r;
        out[i] = r * (gv[i] * wv[i] - xh * mean_dot);
        dw[c + i] += gv[i] * xh;
      }
      if (dres != nullptr) {
        float rv[N];
        V::load(dres + row * C + c, rv);
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] += rv[i];
      }
      V::store(dx + row * C + c, out);
    }
  }
  for (int64_t c = threadIdx.x * N; c < C; c += kThreads * N) {
#pragma unroll
    for (int i = 0; i < N; ++i) dw_partial[blockIdx.x * C + c + i] = dw[c + i];
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
  // Four blocks an SM fit (48 registers a thread, C * 4 bytes of shared memory up to C = 8192) and
  // keep twice the loads in flight that two did: the backward ran at 2 TB/s with two.
  return std::max<int64_t>(1, std::min<int64_t>(rows, 4 * sms));
}

const char* rmsnorm_backward(Dtype dtype, const void* dy, const void* x, const void* w, const float* rstd,
                             const void* dres, void* dx, float* dw_partial, int64_t rows, int64_t C, void* stream) {
  if (rows == 0) return nullptr;
  const int64_t blocks = rmsnorm_backward_blocks(rows);
  const size_t shared = static_cast<size_t>(C) * sizeof(float);
  LOOM_CUDA_DISPATCH(dtype, {
    if (shared + 1024 > 48 * 1024) {  // block_sum's static bytes count against the same 48 KB
      const cudaError_t e =
          cudaFuncSetAttribute(rmsnorm_bwd<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
      if (e != cudaSuccess) return cudaGetErrorString(e);
    }
    rmsnorm_bwd<T><<<static_cast<unsigned>(blocks), kThreads, shared, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(w), rstd,
        static_cast<const T*>(dres), static_cast<T*>(dx), dw_partial, rows, C);
  });
  return detail::launch_error();
}

}  // namespace loom::cuda
