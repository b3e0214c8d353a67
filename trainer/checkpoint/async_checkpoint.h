// Asynchronous checkpoint saves (ckpt.async_save): training blocks only while the state is copied to
// host memory; a background thread then writes it with Checkpointer::save (step_N.tmp/, fsync,
// rename, then `latest`), so a failed or killed write leaves the previous checkpoint and `latest`
// as they were.
//
//   save(step, contents)  waits for the previous write (a second save never overlaps the first),
//                         copies every tensor into host buffers that are reused from save to save
//                         (HostBuffers: pinned for CUDA tensors, copied all at once with one
//                         synchronisation; later in-place optimizer updates cannot change what is
//                         written), starts the write and returns the seconds training was blocked
//                         (logged by the caller, once per save: it may have blocked before, gathering).
//                         The buffers stay allocated between saves: host memory for one copy of
//                         the checkpoint, so a save costs copies, not allocations.
//   reserve(like, device) lays those buffers out at start-up, from tensors shaped like what the
//                         saves will copy, in one HostBlock (host_block.h: page-locked for a CUDA
//                         device) that a background thread faults in and registers while training
//                         runs, so that even the first save only copies; a save that comes before
//                         that thread is done waits for it (logged, and counted as blocked time).
//   wait()                blocks until the write in flight (if any) ends and returns its result.
//
// The end of training (and the destructor) must wait(): the process must not exit mid-write. A
// failed write is logged, reported to on_failure (the loop sends an alert) and its step_N.tmp removed;
// training goes on (the next save may succeed), and the result says what failed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "checkpoint.h"

namespace loom {

class HostBlock;

// Host tensors by name, reused while a name keeps its shape and dtype. reserve() makes them in
// advance, in one block prepared on a background thread; a key it did not foresee (or whose shape
// changed) gets its own allocation at take(), as without reserve().
class HostBuffers {
 public:
  HostBuffers() = default;
  ~HostBuffers();  // waits for reserve()'s thread
  HostBuffers(const HostBuffers&) = delete;
  HostBuffers& operator=(const HostBuffers&) = delete;

  // One buffer per (key, like) in a HostBlock (page-locked when cuda_device >= 0), prepared on a
  // background thread started here. Call at most once, before any take().
  void reserve(const safetensors::NamedTensors& like, int cuda_device);
  // Blocks until reserve()'s thread is done (at once without one); returns the seconds waited.
  double wait_reserved();
  // Waits for reserve()'s thread first.
  torch::Tensor take(const std::string& key, const torch::Tensor& like, bool pinned);
  int64_t bytes() const;

 private:
  std::map<std::string, torch::Tensor> by_key_;
  std::thread preparing_;
};

struct AsyncSaveResult {
  int64_t step = -1;   // -1: nothing was saved yet
  std::string path;    // the checkpoint folder, when it succeeded
  std::string error;   // what failed, else ""
  double write_seconds = 0;
  bool ok() const { return step >= 0 && error.empty(); }
};

class AsyncCheckpointer {
 public:
  // on_failure(step, error) runs on the writer thread after a failed write.
  using FailureHook = std::function<void(int64_t step, const std::string& error)>;
  explicit AsyncCheckpointer(Checkpointer& ckpt, FailureHook on_failure = {});
  ~AsyncCheckpointer();  // waits for the write in flight
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Returns the seconds the caller was blocked (waiting for the previous write + copying).
  // write (optional) replaces Checkpointer::save on the writer thread, with the host copy; it
  // returns the checkpoint's folder (a sharded run's ranks write their shard and rank 0 commits).
  using Write = std::function<std::string(int64_t step, CheckpointContents& host)>;
  double save(int64_t step, CheckpointContents&& c, Write write = {});
  AsyncSaveResult wait();
  bool busy() const;  // a write is in flight
  double last_copy_seconds() const { return last_copy_seconds_; }  // the last save()'s copies to host

  // HostBuffers::reserve for the tensors of `like` (shapes and dtypes only; model, optimizer and
  // shard by the names save() gives their copies): call once at start-up.
  void reserve(const CheckpointContents& like, int cuda_device);
  // The host buffer save() copies model tensor `name` into, for a caller that fills it itself
  // before save() (ZeRO-3 gathers the weights unit by unit straight into it); save() then skips
  // the copy of a tensor that already is its buffer. Only while no write is in flight (after wait()).
  torch::Tensor model_buffer(const std::string& name, const torch::Tensor& like);

  // For tests: runs on the writer thread before Checkpointer::save (e.g. to hold the write back).
  void set_before_write(std::function<void(int64_t step)> f) { before_write_ = std::move(f); }

 private:
  void write(int64_t step, CheckpointContents c, const Write& write);

  Checkpointer& ckpt_;
  FailureHook on_failure_;
  std::thread writer_;
  mutable std::mutex mu_;
  bool busy_ = false;
  AsyncSaveResult last_;
  std::function<void(int64_t)> before_write_;
  double last_copy_seconds_ = 0;
  HostBuffers buffers_;
};

// Host copies of every tensor of c (see save()), into `reuse`'s buffers when given, else fresh
// ones; exposed for tests.
CheckpointContents copy_to_host(const CheckpointContents& c, HostBuffers* reuse = nullptr);

}  // namespace loom
