// Dynamic per-tensor FP8 quantization for the FP8 linear layers: the absolute maximum of a bf16
// tensor (one reduction into a device scalar, no host sync) and a quantization pass that reads
// that maximum, scales to the format's range, rounds with saturation, and writes the row-major
// copy, the transposed copy, or both from one read of the input (the backward's GEMMs need each
// operand in the other layout).
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>

#include "common.cuh"

namespace loom::cuda {
namespace {

// A tile of 64 rows x 128 columns per block of 32 x 8 threads: each thread loads 4 bf16 (8 bytes)
// and stores 4 fp8 (4 bytes) in both layouts; 2-byte stores reached ~2.5 TB/s on the H200.
constexpr int kTileRows = 64, kTileCols = 128;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// |x| >= 0, so the bits of a non-negative float order as the float does: atomicMax on them as int.
// A NaN (bits above +inf) wins, and the scale derived from it poisons the output, as it should.
__global__ void amax_bf16_vec8(const __nv_bfloat16* __restrict__ x, int64_t n8, float* __restrict__ amax) {
  float m = 0.0f;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n8;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 raw = *reinterpret_cast<const uint4*>(x + j * 8);
    const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(__bfloat162float(h[k])));
  }
  __shared__ float partial[32];
  m = warp_max(m);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
    m = warp_max(m);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
  }
}

// The dequantization scale amax / fp8_max, or 1 when amax is so small (or 0) that the inverse
// would overflow to inf and make 0 * inf = NaN: such a tensor quantizes to zeros. A NaN amax fails
// the test too, but its elements stay NaN.
__device__ __forceinline__ float scale_of(float amax, float fp8_max) {
  return amax >= fp8_max * FLT_MIN ? amax / fp8_max : 1.0f;
}

template <__nv_fp8_interpretation_t Format>
__global__ void quantize_bf16(const __nv_bfloat16* __restrict__ x, int64_t rows, int64_t cols,
                              const float* __restrict__ amax, float fp8_max, uint8_t* __restrict__ out,
                              uint8_t* __restrict__ out_t, float* __restrict__ scale_out) {
  __shared__ __align__(16) uint8_t tile[kTileRows][kTileCols + 4];
  const float scale = scale_of(*amax, fp8_max);
  const float inv = 1.0f / scale;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *scale_out = scale;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileRows, col0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int c = threadIdx.x * 4;
#pragma unroll
  for (int i = 0; i < kTileRows / 8; ++i) {
    const int r = threadIdx.y + 8 * i;
    const int64_t row = row0 + r, col = col0 + c;
    if (row < rows && col < cols) {  // cols % 4 == 0: col + 3 < cols as well
      const uint2 raw = *reinterpret_cast<const uint2*>(x + row * cols + col);
      const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
      const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
      const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
          make_float2(__low2float(a) * inv, __high2float(a) * inv), __NV_SATFINITE, Format);
      const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
          make_float2(__low2float(b) * inv, __high2float(b) * inv), __NV_SATFINITE, Format);
      const uint32_t q = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
      if (out != nullptr) *reinterpret_cast<uint32_t*>(out + row * cols + col) = q;
      *reinterpret_cast<uint32_t*>(&tile[r][c]) = q;
    }
  }
  if (out_t == nullptr) return;
  __syncthreads();
  // out_t row = a column of x; 16 threads write its 64 bytes of this tile, 4 bytes each.
  const int t = threadIdx.y * 32 + threadIdx.x;
  const int rr = (t % 16) * 4;
#pragma unroll
  for (int j = 0; j < kTileCols / 16; ++j) {
    const int cc = j * 16 + t / 16;
    const int64_t col = col0 + cc, row = row0 + rr;
    if (col < cols && row < rows) {  // rows % 4 == 0: row + 3 < rows as well
      const uint32_t q = static_cast<uint32_t>(tile[rr][cc]) | (static_cast<uint32_t>(tile[rr + 1][cc]) << 8) |
                         (static_cast<uint32_t>(tile[rr + 2][cc]) << 16) | (static_cast<uint32_t>(tile[rr + 3][cc]) << 24);
      *reinterpret_cast<uint32_t*>(out_t + col * rows + row) = q;
    }
  }
}

}  // namespace

const char* fp8_amax_bf16(const void* x, int64_t n, float* amax, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (const char* e = detail::zero_maxima(s, amax)) return e;
  const int64_t n8 = n / 8;
  if (n8 > 0) {
    const unsigned blocks = detail::grid_for(n8) < 2048 ? detail::grid_for(n8) : 2048;  // few atomics
    amax_bf16_vec8<<<blocks, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(x), n8, amax);
  }
  return detail::launch_error();
}

const char* fp8_quantize_bf16(const void* x, int64_t rows, int64_t cols, const float* amax, Fp8Format format,
                              void* out, void* out_t, float* scale_out, void* stream) {
  const dim3 grid(static_cast<unsigned>((cols + kTileCols - 1) / kTileCols),
                  static_cast<unsigned>((rows + kTileRows - 1) / kTileRows));
  const dim3 block(32, 8);
  auto s = static_cast<cudaStream_t>(stream);
  const auto* xp = static_cast<const __nv_bfloat16*>(x);
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  if (format == Fp8Format::kE4M3)
    quantize_bf16<__NV_E4M3><<<grid, block, 0, s>>>(xp, rows, cols, amax, kFp8E4M3Max, o, ot, scale_out);
  else
    quantize_bf16<__NV_E5M2><<<grid, block, 0, s>>>(xp, rows, cols, amax, kFp8E5M2Max, o, ot, scale_out);
  return detail::launch_error();
}

}  // namespace loom::cuda
