// Side-stream batch transfer and allocator statistics (trainer/kernels/cuda/). Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#ifdef LOOM_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>

#include "cuda_batch_transfer.h"
#include "cuda_memory.h"
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
    CHECK(during.device_total == static_cast<int64_t>(at::cuda::getDeviceProperties(0)->totalGlobalMem));
    CHECK(during.device_free <= during.device_total - gib);
  }
  const loom::cuda::MemoryStats after = loom::cuda::memory_stats(0);
  CHECK(after.allocated == before.allocated);
  CHECK(after.peak_allocated - before.allocated >= gib);
  loom::cuda::reset_peak_memory(0);
  CHECK(loom::cuda::memory_stats(0).peak_allocated < before.allocated + gib);
  CHECK_THAT(loom::cuda::describe(after), Catch::Contains(" GiB (peak "));
}

TEST_CASE("memory_breakdown counts each storage once and attributes the rest of the peak to activations") {
  const auto f32 = torch::dtype(torch::kFloat32).device(torch::kCUDA);
  const torch::Tensor p = torch::zeros({1 << 20}, f32), g = torch::zeros({1 << 19}, f32);
  const torch::Tensor m = torch::zeros({1 << 20}, f32), v = torch::zeros({1 << 20}, f32);
  CHECK(loom::cuda::tensor_bytes({p, p.narrow(0, 0, 10), torch::Tensor()}) == 4 << 20);
  loom::cuda::reset_peak_memory(0);
  { const torch::Tensor activation = torch::empty({1 << 22}, f32); }  // 16 MiB, freed
  const loom::cuda::MemoryBreakdown b = loom::cuda::memory_breakdown(0, {p}, {g}, {m, v});
  CHECK(b.parameters == 4 << 20);
  CHECK(b.gradients == 2 << 20);
  CHECK(b.optimizer_state == 8 << 20);
  CHECK(b.activations_peak >= 16 << 20);
  CHECK_THAT(loom::cuda::to_json(b), Catch::StartsWith("{\"parameters\": 4194304, \"gradients\": 2097152, "
                                                       "\"optimizer_state\": 8388608, "));
}
#endif
