#include "grad_sync.h"

#include "loom/error.h"

namespace loom {

void broadcast_parameters(Communicator& comm, const std::vector<torch::Tensor>& params) {
  if (!comm.distributed()) return;
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params) {
    // c10d wants plain contiguous tensors: broadcast the data, not the autograd leaf.
    torch::Tensor d = p.detach();
    if (d.is_contiguous()) {
      comm.broadcast(d, 0);
    } else {
      torch::Tensor c = d.contiguous();
      comm.broadcast(c, 0);
      d.copy_(c);
    }
  }
}

GradSync::GradSync(Communicator& comm, std::vector<torch::Tensor> params, GradSyncOptions opts)
    : comm_(comm), params_(std::move(params)) {
  LOOM_CHECK(opts.bucket_bytes > 0, "parallel.bucket_mb must be positive");
  const size_t n = params_.size();
  bucket_of_.assign(n, 0);
  slot_of_.assign(n, 0);
  seen_.assign(n, false);
  if (!comm_.distributed()) return;  // nothing to reduce

  // Reverse registration order: the head's gradients are ready first.
  int64_t bytes = 0;
  for (size_t k = n; k-- > 0;) {
    const torch::Tensor& p = params_[k];
    LOOM_CHECK(p.requires_grad(), "GradSync: parameter ", k, " does not require grad");
    int64_t pb = p.numel() * static_cast<int64_t>(p.element_size());
    bool fresh = buckets_.empty() || bytes + pb > opts.bucket_bytes ||
                 params_[buckets_.back().params.front()].scalar_type() != p.scalar_type();
    if (fresh) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    slot_of_[k] = b.params.size();
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + params_[b.params.back()].numel());
    b.params.push_back(k);
    bytes += pb;
  }
  for (Bucket& b : buckets_) {
    const torch::Tensor& last = params_[b.params.back()];
    b.flat = torch::zeros({b.offsets.back() + last.numel()}, last.options().requires_grad(false));
  }

  hooks_ = std::make_unique<GradReadyHooks>(params_, std::vector<bool>{}, [this](size_t k) { on_grad_ready(k); });
}

GradSync::~GradSync() {
  hooks_.reset();
  // Pending collectives still reference the buckets: let them finish (errors are moot now).
  for (Bucket& b : buckets_) {
    try {
      comm_.wait(b.pending);
    } catch (const std::exception&) {
    }
  }
}

void GradSync::prepare(bool last) {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = last && comm_.distributed();
  if (armed_) launched_in_hooks_ = 0;
}

void GradSync::on_grad_ready(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!armed_) return;
  Bucket& b = buckets_[bucket_of_[k]];
  // A parameter used by two separately recomputed graphs (activation checkpointing) can receive
  // its gradient twice; that is fine until its bucket has been sent.
  LOOM_ASSERT(!b.launched, "GradSync: parameter ", k, " got a gradient after its bucket ", bucket_of_[k],
              " was sent; give it its own bucket or disable overlap");
  const torch::Tensor& g = params_[k].grad();
  torch::Tensor dst = b.flat.narrow(0, b.offsets[slot_of_[k]], params_[k].numel());
  {
    torch::NoGradGuard no_grad;
    if (g.defined()) dst.copy_(g.reshape({-1}));
    else dst.zero_();
  }
  if (!seen_[k]) {
    seen_[k] = true;
    ++b.ready;
  }
  if (b.ready == b.params.size()) launch_ready_prefix();
}

void GradSync::launch(Bucket& b) {
  b.launched = true;
  b.pending = comm_.all_reduce_async(b.flat);
}

void GradSync::launch_ready_prefix() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    launch(buckets_[next_launch_]);
    ++next_launch_;
    ++launched_in_hooks_;
  }
}

void GradSync::finish() {
  if (!comm_.distributed()) return;
  std::lock_guard<std::mutex> lock(mu_);
  LOOM_ASSERT(armed_, "GradSync::finish() without prepare(true) before the last backward");
  torch::NoGradGuard no_grad;
  // Parameters that got no gradient this step contribute zeros, so every rank launches the same
  // buckets in the same order.
  for (; next_launch_ < buckets_.size(); ++next_launch_) {
    Bucket& b = buckets_[next_launch_];
    for (size_t s = 0; s < b.params.size(); ++s) {
      size_t k = b.params[s];
      if (seen_[k]) continue;
      torch::Tensor dst = b.flat.narrow(0, b.offsets[s], params_[k].numel());
      const torch::Tensor& g = params_[k].grad();
      if (g.defined()) dst.copy_(g.reshape({-1}));
      else dst.zero_();
    }
    launch(b);
  }
  for (Bucket& b : buckets_) {
    comm_.wait(b.pending);
    for (size_t s = 0; s < b.params.size(); ++s) {
      torch::Tensor& p = params_[b.params[s]];
      torch::Tensor sum = b.flat.narrow(0, b.offsets[s], p.numel()).view(p.sizes());
      if (p.grad().defined()) p.mutable_grad().copy_(sum);
      else p.mutable_grad() = sum.clone();
    }
    b.ready = 0;
    b.launched = false;
  }
  std::fill(seen_.begin(), seen_.end(), false);
  next_launch_ = 0;
  armed_ = false;
}

}  // namespace loom
