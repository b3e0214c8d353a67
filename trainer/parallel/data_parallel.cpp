#include "data_parallel.h"

#include <map>
#include <tuple>

#include "grad_sync.h"
#include "loom/error.h"
#include "loom/hash.h"
#include "loom/sys.h"
#include "model_state.h"
#include "zero.h"

namespace loom {

void ParallelOptions::validate() const {
  LOOM_CHECK(zero1 >= -1, "parallel.zero1 must be -1, 0 (every rank), 1 (off) or a shard count, got ", zero1);
  LOOM_CHECK(bucket_mb > 0, "parallel.bucket_mb must be > 0, got ", bucket_mb);
  LOOM_CHECK(timeout_s > 0, "parallel.timeout_s must be > 0, got ", timeout_s);
  LOOM_CHECK(backend == "auto" || backend == "gloo" || backend == "nccl", "parallel.backend must be auto, gloo or nccl, got '",
             backend, "'");
  LOOM_CHECK(zero_stage >= 1 && zero_stage <= 3, "parallel.zero_stage must be 1, 2 or 3, got ", zero_stage);
  LOOM_CHECK(zero_stage == 1 || zero1 != 1, "parallel.zero_stage=", zero_stage,
             " shards over the ranks parallel.zero1 names, but parallel.zero1=1 (no sharding): set "
             "parallel.zero1=-1 (every rank) or a shard count");
}

DataParallelUpdate::DataParallelUpdate(Communicator& comm, const safetensors::NamedTensors& named,
                                       const OptimizerOptions& o, const ParallelOptions& p)
    : comm_(comm) {
  p.validate();
  for (const auto& [name, t] : named)
    if (t.requires_grad()) named_.emplace_back(name, t);
  std::vector<torch::Tensor> params;
  std::vector<bool> decay;
  for (const auto& [name, t] : named_) {
    params.push_back(t);
    decay.push_back(takes_weight_decay(name, t, o));
    num_decay_ += decay.back() ? 1 : 0;
  }
  if (p.zero1 != 1) {
    zero_ = std::make_unique<ZeroOptimizer>(comm_, named_, decay, o, static_cast<int>(p.zero1),
                                            static_cast<int>(p.zero_stage));
  } else {
    opt_ = std::make_unique<Optimizer>(named_, o);
    if (o.overlap_update) opt_->overlap_updates();
    if (comm_.distributed())
      sync_ = std::make_unique<GradSync>(comm_, params, GradSyncOptions{static_cast<int64_t>(p.bucket_mb * (1 << 20))});
  }
}

DataParallelUpdate::~DataParallelUpdate() = default;

void DataParallelUpdate::broadcast_parameters() {
  if (opt_) opt_->forget_weight_amax();  // the collective writes the weights behind ATen's back
  if (comm_.distributed()) {
    std::vector<torch::Tensor> params;
    for (const auto& kv : named_) params.push_back(kv.second);
    loom::broadcast_parameters(comm_, params);
  }
  if (zero_) zero_->shard_parameters();
}

void DataParallelUpdate::publish_fp8_weight_amax() {
  if (opt_) opt_->publish_weight_amax();
}

LayerHooks* DataParallelUpdate::layer_hooks() { return zero_ ? zero_->hooks() : opt_->layer_hooks(); }

safetensors::NamedTensors DataParallelUpdate::whole_model_state(
    const safetensors::NamedTensors& named, const std::function<torch::Tensor(const std::string&, const torch::Tensor&)>& host_for) {
  if (opt_) opt_->settle();  // an overlapped update may still be writing the weights
  if (!zero_ || zero_->stage() < 3) return named;
  const auto gathered = zero_->gather_named_parameters(host_for);
  if (comm_.rank() != 0) return named;
  std::map<std::string, torch::Tensor> by_name(gathered.begin(), gathered.end());
  safetensors::NamedTensors out;
  for (const auto& [name, t] : named) {
    auto it = by_name.find(name);
    out.emplace_back(name, it != by_name.end() ? it->second : t);  // buffers are not sharded
  }
  return out;
}

int64_t DataParallelUpdate::resident_parameter_bytes() const {
  if (zero_) return zero_->resident_parameter_bytes();
  int64_t bytes = 0;
  for (const auto& kv : named_) bytes += kv.second.numel() * static_cast<int64_t>(kv.second.element_size());
  return bytes;
}

void DataParallelUpdate::before_backward(bool last) {
  if (sync_) sync_->prepare(last);
}

OptimizerStepResult DataParallelUpdate::step(double lr) {
  if (zero_) {
    const ZeroStepResult z = zero_->step(lr);
    return {z.grad_norm, z.skipped};
  }
  if (sync_) sync_->finish();
  return opt_->step(lr);
}

void DataParallelUpdate::zero_grad() {
  if (zero_)
    zero_->zero_grad();
  else
    opt_->zero_grad();
}

int64_t DataParallelUpdate::updates() const { return zero_ ? zero_->updates() : opt_->updates(); }

int DataParallelUpdate::shards() const { return zero_ ? zero_->shards() : 1; }

int DataParallelUpdate::zero_stage() const { return zero_ ? zero_->stage() : 0; }

std::string DataParallelUpdate::describe() const {
  if (zero_) {
    static const char* const what[] = {"", "optimizer state", "optimizer state and gradients",
                                       "optimizer state, gradients and weights"};
    return "ZeRO-" + std::to_string(zero_->stage()) + ": " + what[zero_->stage()] + " in " +
           std::to_string(zero_->shards()) + " shard(s) over " + std::to_string(comm_.world()) + " rank(s), " +
           std::to_string(zero_->numel()) + " elements in " + std::to_string(zero_->num_units()) + " units";
  }
  if (sync_)
    return "replicated optimizer, gradients all-reduced in " + std::to_string(sync_->num_buckets()) +
           " bucket(s) over " + std::to_string(comm_.world()) + " ranks";
  return "replicated optimizer, one rank";
}

safetensors::NamedTensors DataParallelUpdate::replicated_state() const {
  return opt_ ? opt_->state() : safetensors::NamedTensors{};
}

std::optional<CheckpointFile> DataParallelUpdate::save_shard(const std::string& dir) const {
  CheckpointContents c;
  shard_contents(c);
  return write_shard(dir, c);
}

void DataParallelUpdate::shard_contents(CheckpointContents& c) const {
  if (!zero_ || !zero_->writes_shard()) return;
  c.shard_name = zero1_shard_name(comm_.rank());
  std::tie(c.shard, c.shard_metadata) = zero_->shard_state();
}

void DataParallelUpdate::shard_layout(CheckpointContents& c) const {
  if (!zero_ || !zero_->writes_shard()) return;
  c.shard_name = zero1_shard_name(comm_.rank());
  c.shard = zero_->shard_layout();
}

void DataParallelUpdate::load(const std::string& dir) {
  const std::string plain = dir + "/optimizer.safetensors";
  const std::vector<std::string> shard_files = zero1_shard_files(dir);
  LOOM_CHECK(sys::exists(plain) || !shard_files.empty(), dir, ": no optimizer state (optimizer.safetensors or ",
             zero1_shard_name(0), "...)");
  torch::NoGradGuard no_grad;
  if (zero_) {
    if (!shard_files.empty()) {
      zero_->load_shards(shard_files);
      return;
    }
    // A replicated checkpoint: its per-tensor state, flattened in this optimizer's order.
    safetensors::Reader r(plain), model(dir + "/model.safetensors");
    std::vector<torch::Tensor> master, m, v;
    for (const auto& [name, p] : named_) {
      const bool has_master = p.scalar_type() != torch::kFloat32;  // else the weights loaded are the masters
      const torch::Tensor w = has_master ? checkpoint_master(r, model, name) : p.detach();
      master.push_back(w.to(torch::kCPU, torch::kFloat32).reshape(-1));
      m.push_back(r.get("exp_avg." + name).to(torch::kFloat32).reshape(-1));
      v.push_back(r.get("exp_avg_sq." + name).to(torch::kFloat32).reshape(-1));
      LOOM_CHECK(m.back().numel() == p.numel() && v.back().numel() == p.numel(), plain, ": the state of '", name,
                 "' has ", m.back().numel(), " elements, the parameter ", p.numel());
    }
    const double step = r.get("step").item<double>();
    zero_->load_full(torch::cat(master), torch::cat(m), torch::cat(v), static_cast<int64_t>(step));
    return;
  }
  if (sys::exists(plain)) {
    // A model that is not fp32 from a checkpoint of an fp32 one: its masters are that model's weights.
    const safetensors::Reader r(plain);
    std::vector<std::string> lacking;
    for (const auto& [name, p] : named_)
      if (p.scalar_type() != torch::kFloat32 && !r.contains("master." + name)) lacking.push_back(name);
    if (lacking.empty()) opt_->load_state(r);
    else opt_->load_state(optimizer_state_with_masters(dir, lacking), plain + " (the masters from model.safetensors)");
    return;
  }
  // A ZeRO-1 checkpoint into a replicated optimizer: gather the shards, cut per parameter.
  const ZeroFullState full = read_zero_shards(shard_files);
  int64_t total = 0;
  for (const auto& kv : named_) total += kv.second.numel();
  LOOM_CHECK(full.master.numel() == total, dir, ": the ZeRO shards hold ", full.master.numel(),
             " elements, this model has ", total, " trainable parameters");
  safetensors::NamedTensors state;
  state.emplace_back("step", torch::full({}, static_cast<double>(full.updates), torch::kFloat64));
  int64_t off = 0;
  for (const auto& [name, p] : named_) {
    auto piece = [&](const torch::Tensor& flat) { return flat.narrow(0, off, p.numel()).view(p.sizes()); };
    state.emplace_back("exp_avg." + name, piece(full.exp_avg));
    state.emplace_back("exp_avg_sq." + name, piece(full.exp_avg_sq));
    if (p.scalar_type() != torch::kFloat32)
      state.emplace_back("master." + name, piece(full.master));
    else  // an fp32 model's master weights are its parameters: they come from the shards too
      p.detach().copy_(piece(full.master));
    off += p.numel();
  }
  opt_->load_state(state, dir + "/" + sys::basename(shard_files.front()) + " (and the other shards)");
}

}  // namespace loom
