// Asynchronous checkpoints' host buffers on a CUDA device (trainer/checkpoint/host_block.h). Label gpu.
// LibTorch first: glog (through c10) defines CHECK too, and Catch's definition must be the last.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#ifdef LOOM_CUDA_KERNELS
#include "async_checkpoint.h"
#include "loom/sys.h"
#include "gpu_util.h"
#include "test_util.h"

TEST_CASE("reserved checkpoint host buffers are page-locked and take the device copies unchanged") {
  // Two 160 MiB tensors and a small one: page-locked in two pieces (256 MiB each at most, whole buffers).
  const auto f32 = torch::dtype(torch::kFloat32).device(loom::test::cuda());
  torch::manual_seed(5);
  loom::CheckpointContents c;
  c.model = {{"a", torch::randn({40 << 20}, f32)}, {"b", torch::randn({40 << 20}, f32)}, {"c", torch::arange(1000, f32)}};
  c.optimizer = {{"step", torch::full({}, 3.0, torch::kFloat64)}};
  loom::safetensors::NamedTensors keyed;
  for (const auto& [name, t] : c.model) keyed.emplace_back("model/" + name, t);
  for (const auto& [name, t] : c.optimizer) keyed.emplace_back("optimizer/" + name, t);
  loom::CheckpointContents kept;  // outlives the buffers
  {
    loom::HostBuffers buffers;
    buffers.reserve(keyed, 0);
    CHECK(buffers.wait_reserved() >= 0);
    const int64_t reserved = buffers.bytes();
    for (int round = 0; round < 2; ++round) {  // the second save reuses the same buffers
      const loom::CheckpointContents host = loom::copy_to_host(c, &buffers);
      for (size_t i = 0; i < c.model.size(); ++i) {
        INFO(c.model[i].first);
        CHECK(host.model[i].second.is_pinned());
        CHECK(torch::equal(host.model[i].second, c.model[i].second.cpu()));
      }
      CHECK(host.optimizer[0].second.item<double>() == 3.0);
      CHECK(buffers.bytes() == reserved);
      c.model[0].second.add_(1);
    }
    kept = loom::copy_to_host(c, &buffers);
  }
  // The buffers are gone; every tensor cut from their block holds the block (mapped, page-locked)
  // until the last of them goes, here at the end of the test, while the device tensors still live.
  for (size_t i = 0; i < c.model.size(); ++i) {
    INFO(c.model[i].first);
    CHECK(kept.model[i].second.is_pinned());
    CHECK(torch::equal(kept.model[i].second, c.model[i].second.cpu()));
  }
}

TEST_CASE("an async save from the device through reserved buffers writes the synchronous bytes") {
  const auto f32 = torch::dtype(torch::kFloat32).device(loom::test::cuda());
  torch::manual_seed(6);
  auto contents = [&] {
    loom::CheckpointContents c;
    c.model = {{"w", torch::randn({1000, 37}, f32)}, {"h", torch::randn({64}, f32).to(torch::kBFloat16)}};
    c.optimizer = {{"step", torch::full({}, 2.0, torch::kFloat64)}, {"exp_avg.w", torch::randn({1000, 37}, f32)}};
    c.state_json = "{\"step\": 4}\n";
    c.config_ini = "";
    return c;
  };
  const loom::CheckpointContents c = contents();
  // Removed with rm -rf (test_util.h), not std::filesystem: libtorch_cpu.so (2.x) exports its own
  // copy of std::filesystem's symbols, and libstdc++'s remove_all bound to them crashed here.
  loom::test::TempDir dir("gpu_async_ckpt");
  const std::string& root = dir.path();
  loom::Checkpointer sync_ck({root + "/sync", 2}), async_ck({root + "/async", 2});
  sync_ck.save(4, c);
  {
    loom::AsyncCheckpointer ac(async_ck);
    ac.reserve(c, 0);
    loom::CheckpointContents copy = c;
    ac.save(4, std::move(copy));
    REQUIRE(ac.wait().ok());
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json", "manifest.json"}) {
      INFO(f);
      CHECK(loom::sys::read_file(root + "/async/step_4/" + f) == loom::sys::read_file(root + "/sync/step_4/" + f));
    }
  }  // the writer joined, the block unregistered and unmapped, the device tensors alive
  CHECK(loom::validate_checkpoint(root + "/async/step_4") == 4);
  // A second checkpointer: its block is made and torn down again in the same process.
  {
    loom::AsyncCheckpointer ac(async_ck);
    ac.reserve(c, 0);
    ac.save(5, contents());
    REQUIRE(ac.wait().ok());
  }
  CHECK(loom::validate_checkpoint(root + "/async/step_5") == 5);
}
#endif
