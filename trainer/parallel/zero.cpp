#include "zero.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include <torch/cuda.h>

#include "loom/error.h"

namespace loom {
namespace {

constexpr const char* kFormat = "loom.zero.v2";
constexpr const char* kFormatV1 = "loom.zero1.v1";  // stage 1 before units: one range, begin/end

int64_t parse_int(const std::string& path, const std::string& key, const std::string& text) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  LOOM_FAIL(path, ": ZeRO shard metadata '", key, "'='", text, "' is not an integer");
}

int64_t meta_int(const safetensors::Reader& r, const std::string& key) {
  auto it = r.metadata().find(key);
  LOOM_CHECK(it != r.metadata().end(), r.path(), ": ZeRO shard metadata lacks '", key, "'");
  return parse_int(r.path(), key, it->second);
}

// Storage without memory, and memory for it again: views of the tensor (parameters, what autograd
// saved) see the same storage, so they are valid again once it is refilled.
void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (s->nbytes() == bytes) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

// One shard file's ranges, checked: (global begin, length) in file order.
struct ShardInfo {
  int64_t numel = 0, updates = 0, elements = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;
};

ShardInfo read_shard_info(const safetensors::Reader& r) {
  auto fmt = r.metadata().find("format");
  const std::string f = fmt == r.metadata().end() ? "" : fmt->second;
  LOOM_CHECK(f == kFormat || f == kFormatV1, r.path(), ": not a ZeRO optimizer shard (metadata format ",
             f.empty() ? std::string("missing") : "'" + f + "'", ", expected '", kFormat, "')");
  ShardInfo i;
  i.numel = meta_int(r, "numel");
  i.updates = meta_int(r, "updates");
  LOOM_CHECK(i.numel >= 0 && i.updates >= 0, r.path(), ": negative numel or updates");
  if (f == kFormatV1) {
    i.ranges.emplace_back(meta_int(r, "begin"), meta_int(r, "end") - meta_int(r, "begin"));
  } else {
    auto it = r.metadata().find("ranges");
    LOOM_CHECK(it != r.metadata().end(), r.path(), ": ZeRO shard metadata lacks 'ranges'");
    const std::string& text = it->second;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t comma = text.find(',', pos);
      if (comma == std::string::npos) comma = text.size();
      const std::string item = text.substr(pos, comma - pos);
      const size_t colon = item.find(':');
      LOOM_CHECK(colon != std::string::npos, r.path(), ": range '", item, "' is not BEGIN:END");
      const int64_t b = parse_int(r.path(), "ranges", item.substr(0, colon));
      const int64_t e = parse_int(r.path(), "ranges", item.substr(colon + 1));
      i.ranges.emplace_back(b, e - b);
      pos = comma + 1;
    }
  }
  for (const auto& [b, n] : i.ranges) {
    LOOM_CHECK(0 <= b && n >= 0 && b + n <= i.numel, r.path(), ": shard range [", b, ", ", b + n, ") outside [0, ",
               i.numel, ")");
    i.elements += n;
  }
  return i;
}

constexpr const char* kStateNames[] = {"master", "exp_avg", "exp_avg_sq"};

// The three state tensors of a shard file, checked against its ranges.
std::vector<torch::Tensor> read_state(const safetensors::Reader& r, const ShardInfo& info) {
  std::vector<torch::Tensor> out;
  for (const char* name : kStateNames) {
    torch::Tensor t = r.get(name);
    LOOM_CHECK(t.dim() == 1 && t.numel() == info.elements && t.scalar_type() == torch::kFloat32, r.path(),
               ": tensor '", name, "' is not [", info.elements, "] F32");
    out.push_back(t);
  }
  return out;
}

// For each range of a file overlapping [lo, hi) of the whole vector: f(global begin, length,
// offset in the file's tensors).
template <typename F>
void for_overlaps(const ShardInfo& info, int64_t lo, int64_t hi, F f) {
  int64_t file_pos = 0;
  for (const auto& [b, n] : info.ranges) {
    const int64_t x = std::max(lo, b), y = std::min(hi, b + n);
    if (x < y) f(x, y - x, file_pos + (x - b));
    file_pos += n;
  }
}

}  // namespace

struct ZeroOptimizer::Unit {
  size_t first = 0, last = 0;  // parameters [first, last)
  int64_t layer = -1;          // decoder layer, -1 outside the layers
  int64_t offset = 0;          // in the whole unpadded vector
  int64_t numel = 0, chunk = 0;
  int64_t shard_pos = 0;       // of its chunk in this rank's shard vectors
  torch::Dtype dtype = torch::kFloat32;
  // Stage 3: the chunk in the model's dtype, and the gathered unit [world * chunk] whose storage the
  // parameters view (empty while released).
  torch::Tensor shard_param, full;
  bool gathered = true;
  Communicator::Pending gathering;
  // Gradient reduction in flight: [shards-or-world * chunk] fp32 in, [chunk] out.
  torch::Tensor grad_in, grad_out;
  Communicator::Pending reducing;
  size_t ready = 0;
  bool summed = false;  // its gradient shard holds this step's first sum (later ones are added)
};

ZeroOptimizer::ZeroOptimizer(Communicator& comm, const std::vector<std::pair<std::string, torch::Tensor>>& named,
                             const std::vector<bool>& decay, const OptimizerOptions& opts, int shards, int stage)
    : comm_(comm), named_(named), opts_(opts), stage_(stage) {
  opts_.validate();
  LOOM_ASSERT(decay.size() == named_.size(), "ZeroOptimizer: ", decay.size(), " decay flags for ", named_.size(),
              " parameters");
  LOOM_CHECK(stage_ >= 1 && stage_ <= 3, "parallel.zero_stage must be 1, 2 or 3, got ", stage_);
  const int world = comm_.world();
  shards_ = shards <= 0 ? world : shards;
  LOOM_CHECK(shards_ <= world && world % shards_ == 0, "parallel.zero1=", shards,
             ": the shard count must divide the data-parallel world size ", world, " (or be -1 for all ranks)");
  shard_index_ = comm_.rank() % shards_;

  build_units();
  plan_shard_runs(decay);
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(comm_.device());
  master_ = torch::zeros({shard_size_}, f32);
  exp_avg_ = torch::zeros_like(master_);
  exp_avg_sq_ = torch::zeros_like(master_);
  grad_ = torch::zeros_like(master_);
  master_from_parameters();
  if (stage_ >= 2) install_grad_hooks();
}

void ZeroOptimizer::build_units() {
  // Units: runs of parameters of one decoder layer (or of none) and one dtype.
  unit_of_.resize(named_.size());
  for (size_t i = 0; i < named_.size(); ++i) {
    const torch::Tensor& p = named_[i].second;
    const int64_t layer = layer_of(named_[i].first);
    if (units_.empty() || units_.back()->layer != layer || units_.back()->dtype != p.scalar_type()) {
      auto u = std::make_unique<Unit>();
      u->first = i;
      u->layer = layer;
      u->dtype = p.scalar_type();
      u->offset = numel_;
      units_.push_back(std::move(u));
    }
    Unit& u = *units_.back();
    u.last = i + 1;
    u.numel += p.numel();
    numel_ += p.numel();
    unit_of_[i] = units_.size() - 1;
  }
  // Each unit's chunk (its 1/S, padded) goes into the shard vectors in unit order.
  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = *units_[k];
    u.chunk = (u.numel + shards_ - 1) / shards_;
    u.shard_pos = shard_size_;
    shard_size_ += u.chunk;
    if (u.layer >= 0) {
      if (static_cast<size_t>(u.layer) >= layer_units_.size()) layer_units_.resize(u.layer + 1);
      layer_units_[u.layer].push_back(k);
    }
  }
}

void ZeroOptimizer::plan_shard_runs(const std::vector<bool>& decay) {
  // Each parameter's part of this shard, adjacent parts of the same rule merged.
  for (const auto& up : units_) {
    const Unit& u = *up;
    const int64_t lo = shard_index_ * u.chunk, hi = std::min(u.numel, lo + u.chunk);  // within the unit
    int64_t at = 0;
    for (size_t i = u.first; i < u.last; ++i) {
      const int64_t n = named_[i].second.numel();
      const int64_t b = std::max(lo, at), e = std::min(hi, at + n);
      at += n;
      if (b >= e) continue;
      std::vector<Run>& runs = decay[i] ? decay_runs_ : plain_runs_;
      const int64_t pos = u.shard_pos + (b - lo);
      if (!runs.empty() && runs.back().begin + runs.back().length == pos)
        runs.back().length += e - b;
      else
        runs.push_back({pos, e - b});
    }
  }
}

void ZeroOptimizer::install_grad_hooks() {
  // Layer units are reduced from hooks as backward finishes them, last layer first.
  for (size_t k = units_.size(); k-- > 0;)
    if (units_[k]->layer >= 0) reduce_order_.push_back(k);
  seen_.assign(named_.size(), false);
  std::vector<torch::Tensor> params;
  std::vector<bool> in_layers;
  for (size_t i = 0; i < named_.size(); ++i) {
    params.push_back(named_[i].second);
    in_layers.push_back(units_[unit_of_[i]]->layer >= 0);
  }
  hooks_ = std::make_unique<GradReadyHooks>(params, in_layers, [this](size_t i) { on_grad_ready(i); });
}

ZeroOptimizer::~ZeroOptimizer() {
  hooks_.reset();
  // Collectives in flight still reference the units' buffers: let them finish (errors are moot now).
  for (auto& u : units_) {
    for (Communicator::Pending* p : {&u->reducing, &u->gathering}) {
      try {
        comm_.wait(*p);
      } catch (const std::exception&) {
      }
    }
  }
}

std::vector<ZeroOptimizer::Piece> ZeroOptimizer::pieces() const {
  std::vector<Piece> out;
  for (const auto& u : units_) {
    const int64_t lo = shard_index_ * u->chunk, hi = std::min(u->numel, lo + u->chunk);
    if (lo < hi) out.push_back({u->offset + lo, hi - lo, u->shard_pos});
  }
  return out;
}

void ZeroOptimizer::master_from_parameters() {
  torch::NoGradGuard no_grad;
  for (const auto& up : units_) {
    Unit& u = *up;
    const int64_t lo = shard_index_ * u.chunk, hi = std::min(u.numel, lo + u.chunk);
    torch::Tensor dst = master_.narrow(0, u.shard_pos, u.chunk);
    dst.zero_();
    int64_t at = 0;
    for (size_t i = u.first; i < u.last; ++i) {
      const torch::Tensor& p = named_[i].second;
      const int64_t n = p.numel(), b = std::max(lo, at), e = std::min(hi, at + n);
      if (b < e) dst.narrow(0, b - lo, e - b).copy_(p.detach().reshape({-1}).narrow(0, b - at, e - b));
      at += n;
    }
  }
}

void ZeroOptimizer::parameters_from_master() {
  torch::NoGradGuard no_grad;
  const int world = comm_.world();
  for (const auto& up : units_) {
    Unit& u = *up;
    torch::Tensor chunk = master_.narrow(0, u.shard_pos, u.chunk).to(u.dtype);
    if (params_sharded_) {
      u.shard_param.copy_(chunk);
      continue;
    }
    // Ranks 0..S-1 hold chunks 0..S-1 in order: the first S chunks of the gather are the unit.
    torch::Tensor all = torch::empty({world * u.chunk}, chunk.options());
    comm_.all_gather(all, chunk);
    int64_t at = 0;
    for (size_t i = u.first; i < u.last; ++i) {
      torch::Tensor p = named_[i].second.detach();
      p.copy_(all.narrow(0, at, p.numel()).view(p.sizes()));
      at += p.numel();
    }
  }
}

void ZeroOptimizer::shard_parameters() {
  torch::NoGradGuard no_grad;
  if (!loaded_) master_from_parameters();  // after a broadcast every rank holds rank 0's weights
  if (stage_ < 3 || params_sharded_) return;
  const int world = comm_.world();
  for (const auto& up : units_) {
    Unit& u = *up;
    u.shard_param = master_.narrow(0, u.shard_pos, u.chunk).to(u.dtype).clone();
    u.full = torch::empty({world * u.chunk}, u.shard_param.options());
    int64_t at = 0;
    for (size_t i = u.first; i < u.last; ++i) {
      torch::Tensor& p = named_[i].second;
      torch::Tensor view = u.full.narrow(0, at, p.numel()).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);  // the parameter keeps its autograd identity, its storage is the unit's
      at += p.numel();
    }
    u.gathered = true;
  }
  params_sharded_ = true;
  for (const auto& up : units_) release(*up);
}

// ---- stage 3: gathering weights ----

void ZeroOptimizer::prefetch(Unit& u) {
  if (u.gathered || u.gathering.active()) return;
  allocate_storage(u.full);
  u.gathering = comm_.all_gather_async(u.full, u.shard_param);
}

void ZeroOptimizer::ensure_gathered(Unit& u) {
  if (u.gathered) return;
  prefetch(u);
  comm_.wait(u.gathering);
  u.gathered = true;
}

void ZeroOptimizer::release(Unit& u) {
  if (!params_sharded_) return;
  comm_.wait(u.gathering);
  free_storage(u.full);
  u.gathered = false;
}

void ZeroOptimizer::begin_forward() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& u : units_)
    if (u->layer < 0) ensure_gathered(*u);
  if (!layer_units_.empty())
    for (size_t k : layer_units_[0]) prefetch(*units_[k]);
}

void ZeroOptimizer::before_layer(int64_t layer) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k : layer_units_.at(layer)) ensure_gathered(*units_[k]);
  if (static_cast<size_t>(layer + 1) < layer_units_.size())
    for (size_t k : layer_units_[layer + 1]) prefetch(*units_[k]);
}

void ZeroOptimizer::after_layer(int64_t layer, const std::vector<torch::Tensor>& outputs) {
  // Runs before the first node of this layer's backward, whichever output's gradient comes first
  // (pre_backward is idempotent).
  for (const torch::Tensor& out : outputs)
    if (out.requires_grad()) out.register_hook([this, layer](const torch::Tensor&) { pre_backward(layer); });
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k : layer_units_.at(layer)) release(*units_[k]);
}

void ZeroOptimizer::pre_backward(int64_t layer) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k : layer_units_.at(layer)) ensure_gathered(*units_[k]);
  if (layer > 0)
    for (size_t k : layer_units_[layer - 1]) prefetch(*units_[k]);
}

// ---- gradients ----

void ZeroOptimizer::launch_reduce(Unit& u, bool release_grads) {
  torch::NoGradGuard no_grad;
  collect(u);  // its previous micro-batch
  // With S == W a reduce-scatter; with S < W the whole unit is summed and this rank's chunk kept.
  u.grad_in = torch::empty({shards_ * u.chunk}, master_.options());
  u.grad_in.narrow(0, u.numel, shards_ * u.chunk - u.numel).zero_();  // the padding
  int64_t at = 0;
  for (size_t i = u.first; i < u.last; ++i) {
    torch::Tensor& p = named_[i].second;
    const torch::Tensor& g = p.grad();
    torch::Tensor dst = u.grad_in.narrow(0, at, p.numel());
    if (g.defined())
      dst.copy_(g.reshape({-1}));
    else
      dst.zero_();
    if (release_grads) p.mutable_grad() = torch::Tensor();
    at += p.numel();
  }
  if (shards_ == comm_.world()) {
    // The step's first sum goes straight into the gradient shard; later micro-batches' are added.
    u.grad_out = u.summed ? torch::empty({u.chunk}, master_.options()) : grad_.narrow(0, u.shard_pos, u.chunk);
    u.reducing = comm_.reduce_scatter_async(u.grad_out, u.grad_in);
  } else {
    u.reducing = comm_.all_reduce_async(u.grad_in);
  }
  in_flight_.push_back(&u);
  // At most two units' buffers in flight: the whole gradients must not pile up.
  while (in_flight_.size() > 2) collect(*in_flight_.front());
}

void ZeroOptimizer::collect(Unit& u) {
  if (!u.grad_in.defined()) return;
  torch::NoGradGuard no_grad;
  comm_.wait(u.reducing);
  torch::Tensor sum = shards_ == comm_.world() ? u.grad_out : u.grad_in.narrow(0, shard_index_ * u.chunk, u.chunk);
  torch::Tensor dst = grad_.narrow(0, u.shard_pos, u.chunk);
  if (!u.summed) {
    if (sum.data_ptr() != dst.data_ptr()) dst.copy_(sum);
    u.summed = true;
  } else {
    dst.add_(sum);
  }
  u.grad_in = torch::Tensor();
  u.grad_out = torch::Tensor();
  in_flight_.erase(std::remove(in_flight_.begin(), in_flight_.end(), &u), in_flight_.end());
}

void ZeroOptimizer::on_grad_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  Unit& u = *units_[unit_of_[i]];
  if (!seen_[i]) {
    seen_[i] = true;
    ++u.ready;
  }
  // Launch in the fixed order while the next unit is complete.
  while (next_reduce_ < reduce_order_.size()) {
    Unit& next = *units_[reduce_order_[next_reduce_]];
    if (next.ready < next.last - next.first) break;
    launch_reduce(next, /*release_grads=*/true);
    if (stage_ == 3) release(next);
    next.ready = 0;
    for (size_t k = next.first; k < next.last; ++k) seen_[k] = false;
    ++next_reduce_;
  }
  if (next_reduce_ == reduce_order_.size()) next_reduce_ = 0;  // the next micro-batch starts over
}

// ---- the step ----

ZeroStepResult ZeroOptimizer::step(double lr, double grad_scale) {
  torch::NoGradGuard no_grad;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stage_ >= 2) {
      // Layers whose reduction never started (a parameter without gradient) go now, in order.
      for (; next_reduce_ < reduce_order_.size(); ++next_reduce_) {
        Unit& u = *units_[reduce_order_[next_reduce_]];
        launch_reduce(u, true);
        if (stage_ == 3) release(u);
        u.ready = 0;
        for (size_t k = u.first; k < u.last; ++k) seen_[k] = false;
      }
      next_reduce_ = 0;
    }
    // Stage 1: every unit now, from the gradients as they are; stages 2-3: the units outside the
    // layers (the layers were reduced during backward).
    if (stage_ == 1)
      for (const auto& u : units_) u->summed = false;
    for (size_t k = units_.size(); k-- > 0;) {
      Unit& u = *units_[k];
      if (stage_ == 1 || u.layer < 0) launch_reduce(u, /*release_grads=*/stage_ >= 2);
    }
    while (!in_flight_.empty()) collect(*in_flight_.front());
  }
  torch::Tensor grad = grad_;
  if (grad_scale != 1.0) grad.mul_(grad_scale);

  // One global norm: each distinct shard counted once, summed in float64 unit by unit (a float64
  // copy of the whole shard would be twice its size).
  double sq = 0;
  if (comm_.rank() < shards_) {
    torch::Tensor acc = torch::zeros({}, master_.options().dtype(torch::kFloat64));
    for (const auto& u : units_) acc += grad.narrow(0, u->shard_pos, u->chunk).to(torch::kFloat64).pow(2).sum();
    sq = acc.item<double>();
  }
  ZeroStepResult res;
  res.grad_norm = std::sqrt(comm_.all_reduce_scalar(sq));
  if (!std::isfinite(res.grad_norm)) {
    res.skipped = true;
    return res;
  }
  const double coef = clip_coefficient(opts_.clip_grad_norm, res.grad_norm);
  if (coef != 1.0) grad.mul_(coef);
  ++updates_;
  const torch::Tensor step = torch::full({}, static_cast<double>(updates_), master_.options());
  for (const bool decay : {true, false}) {
    std::vector<torch::Tensor> p, g, m, v;
    for (const Run& run : decay ? decay_runs_ : plain_runs_) {
      p.push_back(master_.narrow(0, run.begin, run.length));
      g.push_back(grad.narrow(0, run.begin, run.length));
      m.push_back(exp_avg_.narrow(0, run.begin, run.length));
      v.push_back(exp_avg_sq_.narrow(0, run.begin, run.length));
    }
    adamw_step(p, g, m, v, step, opts_, AdamWStepArgs{lr, decay});
  }
  parameters_from_master();
  if (params_sharded_)
    for (const auto& u : units_) release(*u);  // the root units stayed gathered through the step
  return res;
}

void ZeroOptimizer::zero_grad() {
  std::lock_guard<std::mutex> lock(mu_);
  // A step that was not taken (a loss spike) leaves reductions in flight: finish them first.
  while (!in_flight_.empty()) collect(*in_flight_.front());
  next_reduce_ = 0;
  for (const auto& u : units_) {
    u->ready = 0;
    u->summed = false;  // the next step's first sum overwrites the shard
  }
  std::fill(seen_.begin(), seen_.end(), false);
  for (auto& [name, p] : named_) {
    if (!p.grad().defined()) continue;
    if (stage_ >= 2)
      p.mutable_grad() = torch::Tensor();
    else
      p.mutable_grad().zero_();
  }
}

// ---- whole parameters ----

std::vector<std::pair<std::string, torch::Tensor>> ZeroOptimizer::gather_named_parameters(const HostFor& host_for) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  torch::NoGradGuard no_grad;
  std::lock_guard<std::mutex> lock(mu_);
  int64_t cuda_device = -1;  // set when a copy is asynchronous: waited for at the end
  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = *units_[k];
    const bool was = u.gathered;
    ensure_gathered(u);
    if (k + 1 < units_.size()) prefetch(*units_[k + 1]);  // on its own stream, while this one is copied
    if (comm_.rank() == 0) {
      for (size_t i = u.first; i < u.last; ++i) {
        const torch::Tensor p = named_[i].second.detach();
        if (!host_for) {
          out.emplace_back(named_[i].first, p.to(torch::TensorOptions().device(torch::kCPU), /*non_blocking=*/false, /*copy=*/true));
          continue;
        }
        torch::Tensor host = host_for(named_[i].first, p);
        LOOM_ASSERT(host.is_cpu() && host.sizes() == p.sizes() && host.scalar_type() == p.scalar_type(),
                    "gather_named_parameters: host buffer of '", named_[i].first, "' does not match");
        // Page-locked: queued on the current stream, before the release below; the allocator hands
        // the freed memory out again only to work queued after it on that stream.
        const bool async = p.is_cuda() && host.is_pinned();
        host.copy_(p, /*non_blocking=*/async);
        if (async) cuda_device = p.device().index();
        out.emplace_back(named_[i].first, host);
      }
    }
    if (!was) release(u);
  }
  if (cuda_device >= 0) torch::cuda::synchronize(cuda_device);
  return out;
}

int64_t ZeroOptimizer::resident_parameter_bytes() const {
  std::set<const void*> seen;
  int64_t bytes = 0;
  auto add = [&](const torch::Tensor& t) {
    if (!t.defined()) return;
    const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    if (seen.insert(s).second) bytes += static_cast<int64_t>(s->nbytes());
  };
  for (const auto& kv : named_) add(kv.second);
  for (const auto& u : units_) add(u->shard_param);
  return bytes;
}

// ---- checkpoints ----

safetensors::NamedTensors ZeroOptimizer::shard_layout() const {
  int64_t n = 0;
  for (const Piece& p : pieces()) n += p.length;
  safetensors::NamedTensors ts;
  for (int k = 0; k < 3; ++k)
    ts.emplace_back(kStateNames[k], torch::empty({n}, torch::TensorOptions().dtype(master_.scalar_type()).device(torch::kMeta)));
  return ts;
}

safetensors::WriteResult ZeroOptimizer::save_shard(const std::string& path) const {
  const auto [tensors, meta] = shard_state();
  return safetensors::write(path, tensors, meta);
}

std::pair<safetensors::NamedTensors, safetensors::Metadata> ZeroOptimizer::shard_state() const {
  LOOM_ASSERT(writes_shard(), "rank ", comm_.rank(), " holds a duplicate shard and writes none");
  std::vector<torch::Tensor> parts[3];
  std::string ranges;
  const torch::Tensor* src[3] = {&master_, &exp_avg_, &exp_avg_sq_};
  for (const Piece& p : pieces()) {
    for (int k = 0; k < 3; ++k) parts[k].push_back(src[k]->narrow(0, p.shard_pos, p.length));
    ranges += (ranges.empty() ? "" : ",") + std::to_string(p.global) + ":" + std::to_string(p.global + p.length);
  }
  // Ranges that follow each other in the shard are one view of it: no device copy.
  const std::vector<Piece> ps = pieces();
  bool contiguous = true;
  for (size_t i = 1; i < ps.size(); ++i) contiguous = contiguous && ps[i].shard_pos == ps[i - 1].shard_pos + ps[i - 1].length;
  safetensors::NamedTensors ts;
  for (int k = 0; k < 3; ++k) {
    torch::Tensor t;
    if (parts[k].empty())
      t = torch::empty({0}, master_.options());
    else if (contiguous)
      t = src[k]->narrow(0, ps.front().shard_pos, ps.back().shard_pos + ps.back().length - ps.front().shard_pos);
    else
      t = torch::cat(parts[k]);
    ts.emplace_back(kStateNames[k], t);
  }
  safetensors::Metadata meta = {{"format", kFormat},
                                {"ranges", ranges},
                                {"numel", std::to_string(numel_)},
                                {"shards", std::to_string(shards_)},
                                {"shard", std::to_string(shard_index_)},
                                {"stage", std::to_string(stage_)},
                                {"updates", std::to_string(updates_)}};
  return {ts, meta};
}

ZeroFullState read_zero_shards(const std::vector<std::string>& paths) {
  LOOM_CHECK(!paths.empty(), "ZeRO load: no optimizer shard files given");
  ZeroFullState out;
  int64_t numel = -1, covered = 0;
  for (const std::string& path : paths) {
    safetensors::Reader r(path);
    const ShardInfo info = read_shard_info(r);
    if (numel < 0) {
      numel = info.numel;
      out.updates = info.updates;
      for (torch::Tensor* t : {&out.master, &out.exp_avg, &out.exp_avg_sq}) *t = torch::zeros({numel}, torch::kFloat32);
    }
    LOOM_CHECK(info.numel == numel, path, ": shard of a model with ", info.numel, " parameters, another has ", numel);
    LOOM_CHECK(info.updates == out.updates, path, ": ", info.updates,
               " updates, but another shard of the same checkpoint has ", out.updates);
    const std::vector<torch::Tensor> state = read_state(r, info);
    torch::Tensor* dst[3] = {&out.master, &out.exp_avg, &out.exp_avg_sq};
    for_overlaps(info, 0, numel, [&](int64_t g, int64_t n, int64_t f) {
      for (int k = 0; k < 3; ++k) dst[k]->narrow(0, g, n).copy_(state[k].narrow(0, f, n));
    });
    covered += info.elements;
  }
  LOOM_CHECK(covered == numel, "ZeRO load: the ", paths.size(), " shard files cover ", covered, " elements of ", numel,
             " (a shard file is missing or two overlap)");
  return out;
}

void ZeroOptimizer::load_shards(const std::vector<std::string>& paths) {
  LOOM_CHECK(!paths.empty(), "ZeRO load: no optimizer shard files given");
  const std::vector<Piece> mine = pieces();
  int64_t want = 0, covered = 0, updates = -1;
  for (const Piece& p : mine) want += p.length;
  torch::NoGradGuard no_grad;
  torch::Tensor* dst[3] = {&master_, &exp_avg_, &exp_avg_sq_};
  for (const std::string& path : paths) {
    safetensors::Reader r(path);
    const ShardInfo info = read_shard_info(r);
    LOOM_CHECK(info.numel == numel_, path, ": shard of a model with ", info.numel, " parameters, this model has ",
               numel_);
    LOOM_CHECK(updates < 0 || info.updates == updates, path, ": ", info.updates,
               " updates, but another shard of the same checkpoint has ", updates);
    updates = info.updates;
    std::vector<torch::Tensor> state;
    for (const Piece& p : mine) {
      for_overlaps(info, p.global, p.global + p.length, [&](int64_t g, int64_t n, int64_t f) {
        if (state.empty()) state = read_state(r, info);
        for (int k = 0; k < 3; ++k) dst[k]->narrow(0, p.shard_pos + (g - p.global), n).copy_(state[k].narrow(0, f, n));
        covered += n;
      });
    }
  }
  LOOM_CHECK(covered == want, "ZeRO load: the ", paths.size(), " shard files cover ", covered, " of the ", want,
             " elements this rank's shard holds (a shard file is missing or two overlap)");
  updates_ = updates;
  loaded_ = true;
  parameters_from_master();
}

void ZeroOptimizer::load_full(const torch::Tensor& master, const torch::Tensor& exp_avg,
                              const torch::Tensor& exp_avg_sq, int64_t updates) {
  const torch::Tensor* src[] = {&master, &exp_avg, &exp_avg_sq};
  torch::Tensor* dst[] = {&master_, &exp_avg_, &exp_avg_sq_};
  torch::NoGradGuard no_grad;
  for (int k = 0; k < 3; ++k) {
    LOOM_ASSERT(src[k]->dim() == 1 && src[k]->numel() == numel_, "ZeRO load_full: ", src[k]->numel(),
                " elements for a model of ", numel_);
    dst[k]->zero_();
    for (const Piece& p : pieces())
      dst[k]->narrow(0, p.shard_pos, p.length).copy_(src[k]->narrow(0, p.global, p.length));
  }
  LOOM_CHECK(updates >= 0, "ZeRO load_full: negative update count ", updates);
  updates_ = updates;
  loaded_ = true;
  parameters_from_master();
}

}  // namespace loom
