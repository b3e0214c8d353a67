// c10d's distributed types are only seen here (see torch_compat.h's distributed block).
#define LOOM_COMPAT_C10D 1
#include "torch_compat.h"

#include "communicator.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef LOOM_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <exception>

#include "data_parallel.h"
#include "loom/error.h"
#include "loom/log.h"

namespace loom {

CommOptions::CommOptions() : CommOptions(ParallelOptions{}) {}

CommOptions::CommOptions(const ParallelOptions& p)
    // Capped where a huge timeout_s would not fit the milliseconds' int64_t (about 292 million years).
    : timeout(static_cast<int64_t>(std::min(p.timeout_s * 1000, 9e18))), backend(p.backend) {}

namespace {

constexpr const char* kFailureKey = "loom/failure";

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
  }
  LOOM_ASSERT(false, "unknown ReduceOp");
}

bool is_loopback(const std::string& addr) {
  return addr == "127.0.0.1" || addr == "localhost" || addr == "::1";
}

// The first line of an exception's text (c10 appends long C++ backtraces).
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::CommBackend> pg;
#ifdef LOOM_CUDA
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // pg when the backend is NCCL (shut down explicitly)
#endif
  bool failed = false;  // a collective failed: abort NCCL instead of a graceful shutdown that may wait
};

struct Communicator::Pending::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  torch::Tensor tensor;               // named in a failure report
  const char* name = "all_reduce";
  std::function<void()> then;         // runs after the work completes (Gloo's reduce-scatter)
};
Communicator::Pending::Pending() = default;
Communicator::Pending::~Pending() = default;
Communicator::Pending::Pending(Pending&&) noexcept = default;
Communicator::Pending& Communicator::Pending::operator=(Pending&&) noexcept = default;
bool Communicator::Pending::active() const { return impl_ != nullptr; }

Communicator::Communicator(const LaunchInfo& li, const CommOptions& opts, const torch::Device& device)
    : impl_(std::make_unique<Impl>()),
      rank_(li.rank),
      world_(li.world),
      host_(li.host),
      device_(device),
      opts_(opts) {
  LOOM_CHECK(opts.backend == "auto" || opts.backend == "gloo" || opts.backend == "nccl",
             "parallel.backend='", opts.backend, "': expected auto, gloo or nccl");
  // One rank needs no process group, unless a backend is named: then the whole path runs (a
  // one-GPU check of NCCL end to end).
  if (world_ == 1 && opts.backend == "auto") return;
  std::string backend = opts.backend;
  if (backend == "auto") backend = device.is_cuda() ? "nccl" : "gloo";
#ifndef LOOM_CUDA
  LOOM_CHECK(backend != "nccl", "parallel.backend=nccl: this loom-train was built without CUDA (LOOM_CUDA=OFF)");
#endif
  LOOM_CHECK(backend != "gloo" || device.is_cpu(), "parallel.backend=gloo needs CPU tensors (device ", device.str(),
             "); use nccl");

  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(li.master_port);
  so.isServer = rank_ == 0 && !li.agent_store;
  so.numWorkers = world_;
  so.waitWorkers = true;
  so.timeout = opts.timeout;
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(li.master_addr, so);
  } catch (const std::exception& e) {
    LOOM_FAIL("rank ", rank_, " of ", world_, " (host ", host_, "): rendezvous with the TCPStore at ",
              li.master_addr, ":", li.master_port, " failed within ", opts.timeout.count() / 1000, " s: ",
              first_line(e.what()),
              ". Hint: every rank needs the same MASTER_ADDR/MASTER_PORT, rank 0 must be able to bind the "
              "port, and all WORLD_SIZE ranks must start.");
  }
  try {
    if (backend == "gloo") {
      auto go = c10d::ProcessGroupGloo::Options::create(opts.timeout);
      go->devices.push_back(is_loopback(li.master_addr)
                                ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                : c10d::ProcessGroupGloo::createDefaultDevice());
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, rank_, world_, go);
    } else {
#ifdef LOOM_CUDA
      LOOM_CHECK(device.has_index(), "parallel.backend=nccl needs an indexed CUDA device, got ", device.str());
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(device.index()));
      auto no = c10d::ProcessGroupNCCL::Options::create();
      no->timeout = opts.timeout;
      impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, rank_, world_, no);
      // Bound to its GPU, c10d neither guesses the device from the rank nor warns that it does.
      impl_->nccl->setBoundDeviceId(device);
      impl_->pg = impl_->nccl;
#endif
    }
  } catch (const std::exception& e) {
    LOOM_FAIL("rank ", rank_, " of ", world_, " (host ", host_, "): creating the ", backend,
              " process group failed: ", first_line(e.what()),
              ". Hint: set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the interface the ranks share; "
              "NCCL_DEBUG=INFO explains NCCL's choice.");
  }
  backend_name_ = backend;
  distributed_ = true;
}

Communicator::~Communicator() {
#ifdef LOOM_CUDA
  // c10d warns about leaked resources unless the communicators are destroyed before exit. After a
  // failure a graceful shutdown could wait on a dead peer, so then they are aborted.
  if (impl_ && impl_->nccl) {
    try {
      if (impl_->failed) {
        impl_->nccl->abort();
      } else {
        impl_->nccl->shutdown();
      }
    } catch (const std::exception& e) {
      log::warn("NCCL ", impl_->failed ? "abort" : "shutdown", " at exit failed: ", first_line(e.what()));
    }
  }
#endif
}

void Communicator::fail(const char* collective, const torch::Tensor* t, const std::string& cause) {
  impl_->failed = true;
  std::string peer;
  // Another rank may have said why it went down (best effort: the store may be gone with rank 0).
  try {
    if (impl_->store && impl_->store->check({kFailureKey})) {
      auto v = impl_->store->get(kFailureKey);
      peer = std::string(v.begin(), v.end());
    }
  } catch (const std::exception&) {
  }
  std::string size = t ? loom::str(" of ", t->numel(), " ", t->dtype().name()) : "";
  LOOM_FAIL("rank ", rank_, " of ", world_, " (host ", host_, ") at step ", step_, ": ", collective, size,
            " over ", backend_name_, " failed: ", cause,
            peer.empty() ? std::string() : loom::str(". First failure reported by a peer: ", peer),
            ". A peer rank died, threw or stalled past parallel.timeout_s=", opts_.timeout.count() / 1000,
            " (look for its own error line). Hints: NCCL_DEBUG=INFO shows NCCL's view of the failure; "
            "NCCL_SOCKET_IFNAME (GLOO_SOCKET_IFNAME for gloo) picks the network interface the ranks share.");
}

void Communicator::check_tensor(const char* collective, const torch::Tensor& t) const {
  LOOM_ASSERT(t.defined() && t.is_contiguous(), collective, ": tensors must be defined and contiguous");
  LOOM_ASSERT(t.device() == device_, collective, ": tensor on ", t.device().str(), ", communicator on ",
              device_.str());
}

// Runs one collective: c10d's exceptions and timeouts become our report.
#define LOOM_COLLECTIVE(name, tensor_ptr, ...)                                   \
  do {                                                                           \
    try {                                                                        \
      auto work = (__VA_ARGS__);                                                 \
      work->wait(opts_.timeout);                                                 \
    } catch (const loom::Error&) {                                               \
      throw;                                                                     \
    } catch (const std::exception& e) {                                          \
      fail(name, tensor_ptr, first_line(e.what()));                              \
    }                                                                            \
  } while (0)

void Communicator::broadcast(const torch::Tensor& t, int root) {
  if (!distributed_) return;
  check_tensor("broadcast", t);
  std::vector<at::Tensor> ts{t};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  LOOM_COLLECTIVE("broadcast", &t, impl_->pg->broadcast(ts, o));
}

void Communicator::all_reduce(const torch::Tensor& t, ReduceOp op) {
  if (!distributed_) return;
  check_tensor("all_reduce", t);
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions o;
  o.reduceOp = to_c10d(op);
  LOOM_COLLECTIVE("all_reduce", &t, impl_->pg->allreduce(ts, o));
}

void Communicator::reduce_scatter(const torch::Tensor& output, const torch::Tensor& input) {
  // Gloo's path all-reduces its input in place: a copy keeps the caller's.
  const bool gloo = distributed_ && backend_name_ == "gloo";
  Pending p = reduce_scatter_async(output, gloo ? input.clone() : input);
  wait(p);
}

void Communicator::all_gather(const torch::Tensor& output, const torch::Tensor& input) {
  Pending p = all_gather_async(output, input);
  wait(p);
}

void Communicator::barrier() {
  if (!distributed_) return;
  LOOM_COLLECTIVE("barrier", nullptr, impl_->pg->barrier());
}

double Communicator::all_reduce_scalar(double x, ReduceOp op) {
  if (!distributed_) return x;
  torch::Tensor t = torch::full({1}, x, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  all_reduce(t, op);
  return t.item<double>();
}

Communicator::Pending Communicator::start(const char* name, const torch::Tensor& t,
                                          const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) {
  Pending p;
  p.impl_ = std::make_unique<Pending::Impl>();
  p.impl_->tensor = t;
  p.impl_->name = name;
  try {
    p.impl_->work = launch();
  } catch (const loom::Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(name, &t, first_line(e.what()));
  }
  return p;
}

Communicator::Pending Communicator::all_reduce_async(const torch::Tensor& t) {
  if (!distributed_) return Pending();
  check_tensor("all_reduce", t);
  return start("all_reduce", t, [&] {
    std::vector<at::Tensor> ts{t};
    return impl_->pg->allreduce(ts);
  });
}

Communicator::Pending Communicator::reduce_scatter_async(const torch::Tensor& output, const torch::Tensor& input) {
  LOOM_ASSERT(input.numel() == output.numel() * world_, "reduce_scatter: input ", input.numel(), " != world ", world_,
              " x output ", output.numel());
  if (!distributed_) {
    output.copy_(input.view_as(output));
    return Pending();
  }
  check_tensor("reduce_scatter", input);
  check_tensor("reduce_scatter", output);
  if (backend_name_ == "gloo") {  // Gloo has no reduce-scatter in LibTorch 1.13: all-reduce in place, keep this rank's chunk
    Pending p = start("reduce_scatter", input, [&] {
      std::vector<at::Tensor> ts{input};
      return impl_->pg->allreduce(ts);
    });
    const int64_t n = output.numel(), r = rank_;
    p.impl_->then = [output, input, n, r] { output.copy_(input.narrow(0, r * n, n).view_as(output)); };
    return p;
  }
  return start("reduce_scatter", input, [&] {
    std::vector<at::Tensor> outs{output};
    std::vector<std::vector<at::Tensor>> ins(1);
    for (int r = 0; r < world_; ++r) ins[0].push_back(input.narrow(0, r * output.numel(), output.numel()));
    return impl_->pg->reduce_scatter(outs, ins);
  });
}

Communicator::Pending Communicator::all_gather_async(const torch::Tensor& output, const torch::Tensor& input) {
  LOOM_ASSERT(output.numel() == input.numel() * world_, "all_gather: output ", output.numel(), " != world ", world_,
              " x input ", input.numel());
  if (!distributed_) {
    output.copy_(input.view_as(output));
    return Pending();
  }
  check_tensor("all_gather", input);
  check_tensor("all_gather", output);
  return start("all_gather", input, [&] {
    std::vector<at::Tensor> ins{input};
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < world_; ++r) outs[0].push_back(output.narrow(0, r * input.numel(), input.numel()).view_as(input));
    return impl_->pg->allgather(outs, ins);
  });
}

void Communicator::wait(Pending& p) {
  if (!p.active()) return;
  auto impl = std::move(p.impl_);
  LOOM_COLLECTIVE(impl->name, &impl->tensor, impl->work);
  if (impl->then) impl->then();
}

void Communicator::store_set(const std::string& key, const std::string& value) {
  if (!distributed_) {
    local_store_[key] = value;
    return;
  }
  try {
    impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    fail(("store set '" + key + "'").c_str(), nullptr, first_line(e.what()));
  }
}

std::string Communicator::store_get(const std::string& key) {
  if (!distributed_) {
    auto it = local_store_.find(key);
    LOOM_ASSERT(it != local_store_.end(), "store key '", key, "' was never set");
    return it->second;
  }
  try {
    auto v = impl_->store->get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    fail(("store get '" + key + "'").c_str(), nullptr, first_line(e.what()));
  }
}

void Communicator::report_failure(const std::string& what) noexcept {
  if (!distributed_ || !impl_->store) return;
  try {
    std::string msg = loom::str("rank ", rank_, " (host ", host_, ") at step ", step_, ": ", first_line(what));
    std::vector<uint8_t> v(msg.begin(), msg.end());
    // First reporter wins: compareSet only writes when the key is still absent.
    impl_->store->compareSet(kFailureKey, {}, v);
  } catch (...) {
  }
}

}  // namespace loom
