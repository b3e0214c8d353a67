#include "zero1.h"

#include <algorithm>
#include <cmath>

#include "loom/error.h"

namespace loom {
namespace {

constexpr const char* kFormat = "loom.zero1.v1";

int64_t meta_int(const safetensors::Reader& r, const std::string& key) {
  auto it = r.metadata().find(key);
  LOOM_CHECK(it != r.metadata().end(), r.path(), ": ZeRO-1 shard metadata lacks '", key, "'");
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    LOOM_CHECK(used == it->second.size(), "trailing characters");
    return v;
  } catch (const std::exception&) {
    LOOM_FAIL(r.path(), ": ZeRO-1 shard metadata '", key, "'='", it->second, "' is not an integer");
  }
}

}  // namespace

Zero1Optimizer::Zero1Optimizer(Communicator& comm, std::vector<torch::Tensor> params, const std::vector<bool>& decay,
                               const OptimizerOptions& opts, int shards)
    : comm_(comm), params_(std::move(params)), opts_(opts) {
  opts_.validate();
  LOOM_ASSERT(decay.size() == params_.size(), "Zero1Optimizer: ", decay.size(), " decay flags for ",
              params_.size(), " parameters");
  const int world = comm_.world();
  shards_ = shards <= 0 ? world : shards;
  LOOM_CHECK(shards_ <= world && world % shards_ == 0, "parallel.zero1=", shards,
             ": the shard count must divide the data-parallel world size ", world, " (or be -1 for all ranks)");
  shard_index_ = comm_.rank() % shards_;

  for (const torch::Tensor& p : params_) {
    offsets_.push_back(numel_);
    numel_ += p.numel();
  }
  shard_size_ = (numel_ + shards_ - 1) / shards_;
  padded_ = shard_size_ * shards_;

  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(comm_.device());
  torch::NoGradGuard no_grad;
  torch::Tensor flat = torch::zeros({padded_}, f32);
  for (size_t i = 0; i < params_.size(); ++i)
    flat.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].detach().reshape({-1}));
  master_ = flat.narrow(0, shard_index_ * shard_size_, shard_size_).clone();
  // Each parameter's part of this shard, adjacent parts of the same rule merged.
  const int64_t lo = shard_index_ * shard_size_, hi = lo + shard_size_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t b = std::max(lo, offsets_[i]), e = std::min(hi, offsets_[i] + params_[i].numel());
    if (b >= e) continue;
    std::vector<Run>& runs = decay[i] ? decay_runs_ : plain_runs_;
    if (!runs.empty() && runs.back().begin + runs.back().length == b - lo)
      runs.back().length += e - b;
    else
      runs.push_back({b - lo, e - b});
  }
  exp_avg_ = torch::zeros_like(master_);
  exp_avg_sq_ = torch::zeros_like(master_);
  flat_grad_ = torch::zeros({padded_}, f32);
}

int64_t Zero1Optimizer::shard_begin() const { return std::min(numel_, shard_index_ * shard_size_); }
int64_t Zero1Optimizer::shard_end() const { return std::min(numel_, (shard_index_ + 1) * shard_size_); }

void Zero1Optimizer::zero_grad() {
  for (torch::Tensor& p : params_)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

Zero1StepResult Zero1Optimizer::step(double lr, double grad_scale) {
  torch::NoGradGuard no_grad;
  flat_grad_.zero_();
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& g = params_[i].grad();
    if (g.defined()) flat_grad_.narrow(0, offsets_[i], params_[i].numel()).copy_(g.reshape({-1}));
  }
  // 1. Sum over ranks, this rank's shard only.
  torch::Tensor grad = torch::empty_like(master_);
  if (shards_ == comm_.world()) {
    comm_.reduce_scatter(grad, flat_grad_);
  } else {
    comm_.all_reduce(flat_grad_);
    grad.copy_(flat_grad_.narrow(0, shard_index_ * shard_size_, shard_size_));
  }
  if (grad_scale != 1.0) grad.mul_(grad_scale);

  // 2. One global norm: each distinct shard counted once.
  double sq = comm_.rank() < shards_ ? grad.to(torch::kFloat64).pow(2).sum().item<double>() : 0.0;
  Zero1StepResult res;
  res.grad_norm = std::sqrt(comm_.all_reduce_scalar(sq));
  if (!std::isfinite(res.grad_norm)) {
    res.skipped = true;
    return res;
  }
  // 3. Clip, in place: the shard is this step's own buffer.
  const double coef = clip_coefficient(opts_.clip_grad_norm, res.grad_norm);
  if (coef != 1.0) grad.mul_(coef);
  // 4. The one AdamW, on views of the shard.
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
  // 5. Everyone gets the new parameters.
  gather_params();
  return res;
}

void Zero1Optimizer::gather_params() {
  torch::NoGradGuard no_grad;
  torch::Tensor flat;
  if (shards_ == comm_.world()) {
    flat = torch::empty({padded_}, master_.options());
    comm_.all_gather(flat, master_);
  } else {
    // Ranks 0..S-1 hold shards 0..S-1 in order: the first S chunks are the whole vector.
    torch::Tensor all = torch::empty({shard_size_ * comm_.world()}, master_.options());
    comm_.all_gather(all, master_);
    flat = all.narrow(0, 0, padded_);
  }
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].detach().copy_(flat.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes()));
}

safetensors::WriteResult Zero1Optimizer::save_shard(const std::string& path) const {
  LOOM_ASSERT(writes_shard(), "rank ", comm_.rank(), " holds a duplicate shard and writes none");
  int64_t b = shard_begin(), n = shard_end() - shard_begin();
  safetensors::NamedTensors ts = {{"master", master_.narrow(0, 0, n)},
                                  {"exp_avg", exp_avg_.narrow(0, 0, n)},
                                  {"exp_avg_sq", exp_avg_sq_.narrow(0, 0, n)}};
  safetensors::Metadata meta = {{"format", kFormat},
                                {"begin", std::to_string(b)},
                                {"end", std::to_string(b + n)},
                                {"numel", std::to_string(numel_)},
                                {"shards", std::to_string(shards_)},
                                {"shard", std::to_string(shard_index_)},
                                {"updates", std::to_string(updates_)}};
  return safetensors::write(path, ts, meta);
}

namespace {

// One shard file's metadata, checked.
struct ShardInfo {
  int64_t numel = 0, begin = 0, end = 0, updates = 0;
};

ShardInfo read_shard_info(const safetensors::Reader& r) {
  auto fmt = r.metadata().find("format");
  LOOM_CHECK(fmt != r.metadata().end() && fmt->second == kFormat, r.path(), ": not a ZeRO-1 shard (metadata format ",
             fmt == r.metadata().end() ? std::string("missing") : "'" + fmt->second + "'", ", expected '", kFormat,
             "')");
  ShardInfo i{meta_int(r, "numel"), meta_int(r, "begin"), meta_int(r, "end"), meta_int(r, "updates")};
  LOOM_CHECK(0 <= i.begin && i.begin <= i.end && i.end <= i.numel, r.path(), ": shard range [", i.begin, ", ", i.end,
             ") outside [0, ", i.numel, ")");
  return i;
}

constexpr const char* kStateNames[] = {"master", "exp_avg", "exp_avg_sq"};

// Copies [lo, hi) of the unpadded vector from a shard file into dst[k] (dst[k] starts at dst_begin).
void copy_overlap(const safetensors::Reader& r, const ShardInfo& info, int64_t lo, int64_t hi,
                  torch::Tensor* const dst[3], int64_t dst_begin) {
  for (int k = 0; k < 3; ++k) {
    torch::Tensor t = r.get(kStateNames[k]);
    LOOM_CHECK(t.dim() == 1 && t.numel() == info.end - info.begin && t.scalar_type() == torch::kFloat32, r.path(),
               ": tensor '", kStateNames[k], "' is not [", info.end - info.begin, "] F32");
    dst[k]->narrow(0, lo - dst_begin, hi - lo).copy_(t.narrow(0, lo - info.begin, hi - lo));
  }
}

}  // namespace

Zero1FullState read_zero1_shards(const std::vector<std::string>& paths) {
  LOOM_CHECK(!paths.empty(), "ZeRO-1 load: no optimizer shard files given");
  Zero1FullState out;
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
    torch::Tensor* const dst[3] = {&out.master, &out.exp_avg, &out.exp_avg_sq};
    if (info.end > info.begin) copy_overlap(r, info, info.begin, info.end, dst, 0);
    covered += info.end - info.begin;
  }
  LOOM_CHECK(covered == numel, "ZeRO-1 load: the ", paths.size(), " shard files cover ", covered, " elements of ",
             numel, " (a shard file is missing or two overlap)");
  return out;
}

void Zero1Optimizer::load_shards(const std::vector<std::string>& paths) {
  LOOM_CHECK(!paths.empty(), "ZeRO-1 load: no optimizer shard files given");
  const int64_t b = shard_begin(), e = shard_end();
  int64_t covered = 0;
  int64_t updates = -1;
  torch::NoGradGuard no_grad;
  for (const std::string& path : paths) {
    safetensors::Reader r(path);
    const ShardInfo info = read_shard_info(r);
    LOOM_CHECK(info.numel == numel_, path, ": shard of a model with ", info.numel, " parameters, this model has ",
               numel_);
    LOOM_CHECK(updates < 0 || info.updates == updates, path, ": ", info.updates,
               " updates, but another shard of the same checkpoint has ", updates);
    updates = info.updates;
    int64_t lo = std::max(b, info.begin), hi = std::min(e, info.end);
    if (lo >= hi) continue;
    torch::Tensor* const dst[3] = {&master_, &exp_avg_, &exp_avg_sq_};
    copy_overlap(r, info, lo, hi, dst, b);
    covered += hi - lo;
  }
  LOOM_CHECK(covered == e - b, "ZeRO-1 load: the ", paths.size(), " shard files cover ", covered,
             " elements of this rank's range [", b, ", ", e, ") of ", e - b,
             " (a shard file is missing or two overlap)");
  updates_ = updates;
  gather_params();
}

void Zero1Optimizer::load_full(const torch::Tensor& master, const torch::Tensor& exp_avg,
                               const torch::Tensor& exp_avg_sq, int64_t updates) {
  const torch::Tensor* src[] = {&master, &exp_avg, &exp_avg_sq};
  torch::Tensor* dst[] = {&master_, &exp_avg_, &exp_avg_sq_};
  const int64_t b = shard_begin(), n = shard_end() - shard_begin();
  torch::NoGradGuard no_grad;
  for (int k = 0; k < 3; ++k) {
    LOOM_ASSERT(src[k]->dim() == 1 && src[k]->numel() == numel_, "ZeRO-1 load_full: ", src[k]->numel(),
                " elements for a model of ", numel_);
    dst[k]->zero_();
    dst[k]->narrow(0, 0, n).copy_(src[k]->narrow(0, b, n));
  }
  LOOM_CHECK(updates >= 0, "ZeRO-1 load_full: negative update count ", updates);
  updates_ = updates;
  gather_params();
}

}  // namespace loom
