// The data-parallel process group: an RAII owner of c10d's TCPStore (rendezvous, small key/values)
// and a process group on it — ProcessGroupGloo on CPU, ProcessGroupNCCL for CUDA tensors when built
// with LOOM_CUDA (NCCL's unique id goes through the same store, so no MPI is needed).
//
// Every collective is wrapped once, here: it waits at most `timeout`, and a timeout or a failed
// peer becomes a loom::Error that names this rank, its host, the training step, the collective and
// its size, the first failure another rank reported through the store (if any), and the hints that
// fix most hangs (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME, MASTER_ADDR/MASTER_PORT).
//
// With world == 1 and backend auto nothing is created: collectives are the identity and the store is
// a local map. A named backend (gloo, nccl) creates the process group even for one rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "launch.h"

namespace c10d {
class Work;
}

namespace loom {

struct ParallelOptions;  // data_parallel.h: the [parallel] section

// What the communicator reads of [parallel]: a view of ParallelOptions, whose defaults are its own.
struct CommOptions {
  CommOptions();                                   // ParallelOptions{}'s values
  explicit CommOptions(const ParallelOptions& p);  // p's timeout_s and backend
  std::chrono::milliseconds timeout;               // parallel.timeout_s
  std::string backend;  // parallel.backend: auto (nccl for CUDA devices, else gloo) | gloo | nccl
};

enum class ReduceOp { kSum, kMax, kMin };

class Communicator {
 public:
  // Rendezvous with every other rank at li.master_addr:li.master_port (rank 0 serves the store).
  // device: where the tensors passed to the collectives live.
  Communicator(const LaunchInfo& li, const CommOptions& opts, const torch::Device& device);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  // Whether a process group exists (world > 1, or one rank with a named backend).
  bool distributed() const { return distributed_; }
  const std::string& host() const { return host_; }
  const std::string& backend_name() const { return backend_name_; }
  const torch::Device& device() const { return device_; }
  // The step named in error reports.
  void set_step(int64_t step) { step_ = step; }

  // Collectives, all blocking and in place unless said otherwise. Every rank must call the same
  // collectives in the same order with tensors of the same size.
  void broadcast(const torch::Tensor& t, int root = 0);
  void all_reduce(const torch::Tensor& t, ReduceOp op = ReduceOp::kSum);
  // input: [world * n] contiguous; output: [n] = the SUM over ranks of input's chunk `rank`.
  void reduce_scatter(const torch::Tensor& output, const torch::Tensor& input);
  // input: [n]; output: [world * n] contiguous, chunk r = rank r's input.
  void all_gather(const torch::Tensor& output, const torch::Tensor& input);
  void barrier();
  double all_reduce_scalar(double x, ReduceOp op = ReduceOp::kSum);

  // Collectives started now and finished by wait(), so communication overlaps compute; the
  // tensors must stay alive until then. Without a process group they complete at once.
  class Pending {
   public:
    Pending();
    ~Pending();
    Pending(Pending&&) noexcept;
    Pending& operator=(Pending&&) noexcept;
    bool active() const;

   private:
    friend class Communicator;
    struct Impl;
    std::unique_ptr<Impl> impl_;
  };
  Pending all_reduce_async(const torch::Tensor& t);  // SUM
  Pending reduce_scatter_async(const torch::Tensor& output, const torch::Tensor& input);
  Pending all_gather_async(const torch::Tensor& output, const torch::Tensor& input);
  void wait(Pending& p);

  // The store (for small values: rank table, launch time). get waits for the key up to the timeout.
  void store_set(const std::string& key, const std::string& value);
  std::string store_get(const std::string& key);

  // Best effort: tells the other ranks why this one is going down, so their reports name the
  // cause. Never throws.
  void report_failure(const std::string& what) noexcept;

 private:
  struct Impl;
  Pending start(const char* name, const torch::Tensor& t,
                const std::function<c10::intrusive_ptr<c10d::Work>()>& launch);
  [[noreturn]] void fail(const char* collective, const torch::Tensor* t, const std::string& cause);
  void check_tensor(const char* collective, const torch::Tensor& t) const;

  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int world_ = 1;
  std::string host_;
  std::string backend_name_ = "none";
  torch::Device device_{torch::kCPU};
  CommOptions opts_;
  int64_t step_ = -1;
  bool distributed_ = false;
  std::map<std::string, std::string> local_store_;  // world == 1
};

}  // namespace loom
