// Side-stream batch transfer and allocator statistics (trainer/cuda/). Label gpu.
#include <catch2/catch.hpp>

#ifdef LOOM_CUDA_KERNELS
#include "cuda/batch_transfer.h"
#include "cuda/memory.h"
#include "gpu_util.h"

TEST_CASE("BatchTransfer delivers the batch on the device unchanged, one ahead") {
  loom::cuda::BatchTransfer transfer(0);
  const loom::Batch a = loom::test::make_packed_batch({{30, 34}, {64}}, 64, 1000, 81);
  const loom::Batch b = loom::test::make_packed_batch({{10}, {20, 44}}, 64, 1000, 82);
  transfer.start(a);
  const loom::Batch ga = transfer.finish();
  transfer.start(b);  // in flight while a is used
  CHECK(ga.tokens.is_cuda());
  CHECK(torch::equal(ga.tokens.cpu(), a.tokens));
  CHECK(torch::equal(ga.labels.cpu(), a.labels));
  CHECK(torch::equal(ga.positions.cpu(), a.positions));
  CHECK(torch::equal(ga.segments.cpu(), a.segments));
  CHECK(torch::equal(ga.cu_seqlens.cpu(), a.cu_seqlens));
  CHECK(ga.max_seqlen == a.max_seqlen);
  const loom::Batch gb = transfer.finish();
  CHECK(torch::equal(gb.tokens.cpu(), b.tokens));
  CHECK(torch::equal(gb.cu_seqlens.cpu(), b.cu_seqlens));
  CHECK_THROWS(transfer.finish());
}

TEST_CASE("memory_stats sees a 1 GiB allocation in allocated and peak") {
  torch::cuda::synchronize();
  loom::cuda::reset_peak_memory(0);
  const loom::cuda::MemoryStats before = loom::cuda::memory_stats(0);
  const int64_t gib = int64_t{1} << 30;
  {
    const torch::Tensor t = torch::empty({gib}, torch::dtype(torch::kUInt8).device(torch::kCUDA));
    const loom::cuda::MemoryStats during = loom::cuda::memory_stats(0);
    CHECK(during.allocated - before.allocated >= gib);
    CHECK(during.reserved >= during.allocated);
    CHECK(during.device_total > 100 * gib);  // an H200: ~140 GiB
  }
  const loom::cuda::MemoryStats after = loom::cuda::memory_stats(0);
  CHECK(after.allocated == before.allocated);
  CHECK(after.peak_allocated - before.allocated >= gib);
  loom::cuda::reset_peak_memory(0);
  CHECK(loom::cuda::memory_stats(0).peak_allocated < before.allocated + gib);
  CHECK_THAT(loom::cuda::describe(after), Catch::Contains(" GiB (peak "));
}
#endif
