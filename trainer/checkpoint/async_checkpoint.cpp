#include "async_checkpoint.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <memory>

#include <torch/cuda.h>

#include "host_block.h"

#include "clock.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/sys.h"

namespace loom {

namespace {

// The names under which save() keeps each part's buffers.
constexpr const char* kModelPrefix = "model/";
constexpr const char* kOptimizerPrefix = "optimizer/";
constexpr const char* kShardPrefix = "shard/";

safetensors::NamedTensors copy_tensors(const safetensors::NamedTensors& in, HostBuffers* reuse,
                                       const std::string& prefix) {
  safetensors::NamedTensors out;
  out.reserve(in.size());
  int64_t cuda_device = -1;
  // A copy that throws half-way (a buffer it cannot allocate, a CUDA error) leaves the earlier
  // asynchronous copies in flight into host buffers that may be unmapped soon after (a failed save
  // ends training, and the buffers go with the AsyncCheckpointer): they are waited for first.
  struct WaitOnThrow {
    const int64_t& device;
    ~WaitOnThrow() {
      if (device < 0) return;
      try {
        torch::cuda::synchronize(device);
      } catch (const std::exception& e) {
        log::warn("checkpoint: waiting for the host copies after a failed copy: ", e.what());
      }
    }
  } wait_on_throw{cuda_device};
  for (const auto& [name, t] : in) {
    torch::Tensor host;
    if (t.is_cuda()) {
      // Into pinned memory, asynchronously: the copies overlap each other; one synchronisation below.
      host = reuse ? reuse->take(prefix + name, t, /*pinned=*/true)
                   : torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
      cuda_device = t.device().index();
      host.copy_(t.detach(), /*non_blocking=*/true);
    } else if (reuse) {
      host = reuse->take(prefix + name, t, /*pinned=*/false);
      if (!host.is_same(t)) host.copy_(t.detach());  // else the caller filled the buffer (model_buffer)
    } else {
      // Cloned: its storage would otherwise be shared with the live parameter.
      host = t.detach().to(torch::kCPU).clone(torch::MemoryFormat::Contiguous);
    }
    out.emplace_back(name, std::move(host));
  }
  if (cuda_device >= 0) {
    const int64_t device = cuda_device;
    cuda_device = -1;  // waited for here, where a CUDA error propagates
    torch::cuda::synchronize(device);
  }
  return out;
}

}  // namespace

HostBuffers::~HostBuffers() { wait_reserved(); }

void HostBuffers::reserve(const safetensors::NamedTensors& like, int cuda_device) {
  LOOM_ASSERT(by_key_.empty() && !preparing_.joinable(), "HostBuffers::reserve after the buffers exist");
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const auto& [key, t] : like) {
    offsets.push_back(total);
    const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
    total += (std::max<int64_t>(n, 1) + HostBlock::kAlignment - 1) / HostBlock::kAlignment * HostBlock::kAlignment;
  }
  if (total == 0) return;
  // Shared by every tensor cut from it: the block lives as long as the last of them (a write in
  // flight holds its tensors).
  auto block = std::make_shared<HostBlock>(total, cuda_device);
  for (size_t i = 0; i < like.size(); ++i) {
    const torch::Tensor& t = like[i].second;
    by_key_[like[i].first] = torch::from_blob(block->data() + offsets[i], t.sizes(), [block](void*) {},
                                              torch::TensorOptions().dtype(t.scalar_type()));
  }
  preparing_ = std::thread([block, offsets] {
    // Below the training thread and the data loader: this is background work.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), HostBlock::kNice);
    try {
      log::info("checkpoint host buffers ready: ", block->prepare(offsets));
    } catch (const std::exception& e) {
      // Copies into memory that is not page-locked are still correct, only slower.
      log::warn("checkpoint host buffers: ", e.what(), "; saves copy into pageable memory (slower)");
    }
  });
}

double HostBuffers::wait_reserved() {
  if (!preparing_.joinable()) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  preparing_.join();
  const double waited = seconds_since(t0);
  if (waited > 0.01) log::info("checkpoint: waited ", waited, " s for the host buffers to be ready");
  return waited;
}

torch::Tensor HostBuffers::take(const std::string& key, const torch::Tensor& like, bool pinned) {
  wait_reserved();
  torch::Tensor& b = by_key_[key];
  if (!b.defined() || b.sizes() != like.sizes() || b.scalar_type() != like.scalar_type())
    b = torch::empty(like.sizes(), torch::TensorOptions().dtype(like.scalar_type()).pinned_memory(pinned));
  return b;
}

int64_t HostBuffers::bytes() const {
  int64_t n = 0;
  for (const auto& kv : by_key_) n += kv.second.numel() * static_cast<int64_t>(kv.second.element_size());
  return n;
}

CheckpointContents copy_to_host(const CheckpointContents& c, HostBuffers* reuse) {
  CheckpointContents out;
  out.model = copy_tensors(c.model, reuse, kModelPrefix);
  out.optimizer = copy_tensors(c.optimizer, reuse, kOptimizerPrefix);
  out.shard = copy_tensors(c.shard, reuse, kShardPrefix);
  out.state_json = c.state_json;
  out.config_ini = c.config_ini;
  out.shard_name = c.shard_name;
  out.shard_metadata = c.shard_metadata;
  out.tokenizer_model = c.tokenizer_model;
  out.lr_schedule_ini = c.lr_schedule_ini;
  return out;
}

AsyncCheckpointer::AsyncCheckpointer(Checkpointer& ckpt, FailureHook on_failure)
    : ckpt_(ckpt), on_failure_(std::move(on_failure)) {}

void AsyncCheckpointer::reserve(const CheckpointContents& like, int cuda_device) {
  safetensors::NamedTensors all;
  for (const auto& [prefix, part] : {std::make_pair(kModelPrefix, &like.model), std::make_pair(kOptimizerPrefix, &like.optimizer),
                                     std::make_pair(kShardPrefix, &like.shard)})
    for (const auto& [name, t] : *part) all.emplace_back(prefix + name, t);
  buffers_.reserve(all, cuda_device);
}

torch::Tensor AsyncCheckpointer::model_buffer(const std::string& name, const torch::Tensor& like) {
  LOOM_ASSERT(!busy(), "AsyncCheckpointer::model_buffer while a write is in flight");
  return buffers_.take(kModelPrefix + name, like, like.is_cuda());
}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (writer_.joinable()) {
    log::info("waiting for the checkpoint write in flight before shutting down");
    writer_.join();
  }
}

bool AsyncCheckpointer::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

AsyncSaveResult AsyncCheckpointer::wait() {
  if (writer_.joinable()) writer_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

double AsyncCheckpointer::save(int64_t step, CheckpointContents&& c, Write write_fn) {
  const auto t0 = std::chrono::steady_clock::now();
  if (writer_.joinable()) {
    const bool was_busy = busy();
    writer_.join();
    if (was_busy) log::info("checkpoint step ", step, ": waited ", seconds_since(t0), " s for the previous write");
  }
  const auto t_copy = std::chrono::steady_clock::now();
  CheckpointContents host = copy_to_host(c, &buffers_);
  c = CheckpointContents{};  // the caller's references to device state go now
  const double copy_s = seconds_since(t_copy);
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = true;
  }
  writer_ = std::thread([this, step, h = std::move(host), w = std::move(write_fn)]() mutable {
    write(step, std::move(h), w);
  });
  last_copy_seconds_ = copy_s;
  return seconds_since(t0);  // the caller logs it once, with what it did before (a gather)
}

void AsyncCheckpointer::write(int64_t step, CheckpointContents c, const Write& write_fn) {
  AsyncSaveResult r;
  r.step = step;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (before_write_) before_write_(step);
    r.path = write_fn ? write_fn(step, c) : ckpt_.save(step, c);
    r.write_seconds = seconds_since(t0);
    log::info("checkpoint ", r.path, " written in the background (step ", step, ", ", r.write_seconds, " s)");
  } catch (const std::exception& e) {
    r.error = e.what();
    r.write_seconds = seconds_since(t0);
    // Checkpointer::save renames step_N.tmp and updates `latest` only after every file is written,
    // so the previous checkpoint is intact; remove the half-written folder (best effort).
    const std::string tmp = ckpt_.options().folder + "/" + checkpoint_dir_name(step) + ".tmp";
    try {
      remove_checkpoint_dir(tmp);
    } catch (const std::exception& e2) {
      log::warn("could not remove ", tmp, ": ", e2.what());
    }
    log::error("checkpoint step ", step, " failed in the background writer: ", r.error,
               "; the previous checkpoint stays the latest");
    if (on_failure_) on_failure_(step, r.error);
  }
  c = CheckpointContents{};  // the buffers stay in buffers_ for the next save
  std::lock_guard<std::mutex> lock(mu_);
  last_ = std::move(r);
  busy_ = false;
}

}  // namespace loom
