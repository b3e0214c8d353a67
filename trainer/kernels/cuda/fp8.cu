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

// A tile of 128 x 128 elements per block of 256 threads. Every global access moves 16 bytes
// (loads of 8 bf16, stores of 16 rows of one column) or 8 (row-major stores of 8 fp8), and each
// warp's stores fill whole 128-byte lines: the first version's 8-byte loads and 4-byte stores in
// 64-byte runs moved ~3 TB/s on the H200. The tile passes through shared memory as 32-bit words
// (4 columns of a row), each 16-row band's words XOR-swizzled by the band so that the transposing
// reads, a column of words per thread, hit 32 distinct banks.
constexpr int kTile = 128, kWords = kTile / 4, kThreads = 256;

// The largest |x| into *amax (zeroed by the launcher); fmaxf lets no NaN element count.
__global__ void amax_bf16_vec8(const __nv_bfloat16* __restrict__ x, int64_t n8, float* __restrict__ amax) {
  float m = 0.0f;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n8;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 raw = *reinterpret_cast<const uint4*>(x + j * 8);
    const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(__bfloat162float(h[k])));
  }
  detail::block_max_into(m, amax);
}

// The dequantization scale amax / fp8_max, or 1 when amax is so small (or 0) that the inverse
// would overflow to inf and make 0 * inf = NaN: such a tensor quantizes to zeros. A NaN amax fails
// the test too, but its elements stay NaN.
__device__ __forceinline__ float scale_of(float amax, float fp8_max) {
  return amax >= fp8_max * FLT_MIN ? amax / fp8_max : 1.0f;
}

// The word of row r's 4 columns from 4 * w, at its swizzled place.
__device__ __forceinline__ int swizzled(int r, int w) { return r * kWords + (w ^ (((r >> 4) & 7) << 2)); }

// Bytes k of the 4 words a..d (4 rows of 4 columns): column k's 4 rows, in row order.
__device__ __forceinline__ uint4 columns_of(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  const uint32_t ab01 = __byte_perm(a, b, 0x5140), cd01 = __byte_perm(c, d, 0x5140);  // a0 b0 a1 b1
  const uint32_t ab23 = __byte_perm(a, b, 0x7362), cd23 = __byte_perm(c, d, 0x7362);  // a2 b2 a3 b3
  return make_uint4(__byte_perm(ab01, cd01, 0x5410), __byte_perm(ab01, cd01, 0x7632),
                    __byte_perm(ab23, cd23, 0x5410), __byte_perm(ab23, cd23, 0x7632));
}

template <__nv_fp8_interpretation_t Format>
__global__ void __launch_bounds__(kThreads) quantize_bf16(const __nv_bfloat16* __restrict__ x, int64_t rows,
                                                          int64_t cols, const float* __restrict__ amax, float fp8_max,
                                                          uint8_t* __restrict__ out, uint8_t* __restrict__ out_t,
                                                          float* __restrict__ scale_out) {
  __shared__ __align__(16) uint32_t tile[kTile * kWords];
  const float scale = scale_of(*amax, fp8_max);
  const float inv = 1.0f / scale;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_out = scale;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  // Load: 16 threads a row, 8 columns each; 16 rows a pass.
  const int c = (threadIdx.x % 16) * 8;
#pragma unroll
  for (int pass = 0; pass < kTile / 16; ++pass) {
    const int r = pass * 16 + threadIdx.x / 16;
    const int64_t row = row0 + r, col = col0 + c;
    if (row < rows && col < cols) {  // cols % 16 == 0: the 8 columns are all in
      const uint4 raw = *reinterpret_cast<const uint4*>(x + row * cols + col);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
      uint32_t q[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
            make_float2(__low2float(h[2 * k]) * inv, __high2float(h[2 * k]) * inv), __NV_SATFINITE, Format);
        const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
            make_float2(__low2float(h[2 * k + 1]) * inv, __high2float(h[2 * k + 1]) * inv), __NV_SATFINITE, Format);
        q[k] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
      }
      if (out != nullptr) *reinterpret_cast<uint2*>(out + row * cols + col) = make_uint2(q[0], q[1]);
      // Words c/4 and c/4 + 1 stay neighbours (the swizzle flips bits 2-4 of the word index only).
      *reinterpret_cast<uint2*>(&tile[swizzled(r, c / 4)]) = make_uint2(q[0], q[1]);
    }
  }
  if (out_t == nullptr) return;
  __syncthreads();
  // Store: a thread takes a 16-row band of 4 columns; 8 threads cover a column's 128 rows.
  const int band = threadIdx.x % 8, w = threadIdx.x / 8;
  const int64_t row = row0 + band * 16, col = col0 + w * 4;
  if (row >= rows || col >= cols) return;  // rows % 16 == 0: the band is all in
  uint4 part[4];  // part[g]: rows 4g..4g+3 of the band, one word per column
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const int r = band * 16 + g * 4;
    part[g] = columns_of(tile[swizzled(r, w)], tile[swizzled(r + 1, w)], tile[swizzled(r + 2, w)],
                         tile[swizzled(r + 3, w)]);
  }
  const uint32_t* p = reinterpret_cast<const uint32_t*>(part);  // p[4 g + k]: column k, rows 4g..4g+3
#pragma unroll
  for (int k = 0; k < 4; ++k)
    *reinterpret_cast<uint4*>(out_t + (col + k) * rows + row) = make_uint4(p[k], p[4 + k], p[8 + k], p[12 + k]);
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
  if (rows % 16 != 0 || cols % 16 != 0) return "fp8_quantize_bf16: rows and cols must be multiples of 16";
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  const dim3 block(kThreads);
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
