#include "loader.h"

#include <algorithm>
#include <sstream>

#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"

namespace loom {

// ---- BatchSkipper ----

BatchSkipper::BatchSkipper(const std::string& spec) {
  std::stringstream ss(spec);
  std::string item;
  auto parse_step = [&](const std::string& text) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    LOOM_CHECK(!text.empty() && used == text.size() && v >= 0 && text.find_first_not_of("0123456789") == std::string::npos,
               "data.skip_batches: '", text, "' in \"", spec, "\": expected a step number >= 0 (format \"a-b,c\")");
    return static_cast<int64_t>(v);
  };
  while (std::getline(ss, item, ',')) {
    if (item.empty() && ss.eof()) break;
    const size_t dash = item.find('-');
    const int64_t first = parse_step(dash == std::string::npos ? item : item.substr(0, dash));
    const int64_t last = dash == std::string::npos ? first : parse_step(item.substr(dash + 1));
    LOOM_CHECK(first <= last, "data.skip_batches: range '", item, "' in \"", spec, "\" ends before it starts");
    LOOM_CHECK(ranges_.empty() || ranges_.back().second < first, "data.skip_batches: '", item, "' in \"", spec,
               "\" overlaps or precedes the range before it; list steps in ascending order");
    ranges_.emplace_back(first, last);
  }
}

bool BatchSkipper::should_skip(int64_t step) const {
  // The first range that ends at or after step.
  const auto it = std::lower_bound(ranges_.begin(), ranges_.end(), step,
                                   [](const std::pair<int64_t, int64_t>& r, int64_t s) { return r.second < s; });
  return it != ranges_.end() && it->first <= step;
}

// ---- Loader ----

Loader::Loader(const TrainData& data, const DataOptions& opt, int64_t rank, int64_t world)
    : data_(data),
      layout_{opt.micro_bsz, opt.micro_num, world},
      rank_(rank),
      sampler_(data.packs_per_dataset(), data.weights(), opt.seed, data.mixture()),
      builder_(opt.seq_len, data.pad_id()),
      skipper_(opt.skip_batches),
      capacity_(static_cast<size_t>(opt.prefetch)) {
  LOOM_CHECK(world > 0 && rank >= 0 && rank < world, "rank ", rank, " of world size ", world);
  start_thread();
}

Loader::~Loader() { stop_thread(); }

std::vector<PackRef> Loader::micro_batch_refs(uint64_t consumed, int64_t micro) const {
  std::vector<PackRef> rows;
  rows.reserve(static_cast<size_t>(layout_.micro_bsz));
  for (int64_t i = 0; i < layout_.micro_bsz; ++i) {
    const SampleRef s = sampler_.at(layout_.stream_index(consumed, rank_, micro, i));
    const PackedDataset::Location at = data_.datasets()[s.dataset].locate(s.pack);
    rows.push_back({at.shard, at.pack, static_cast<int64_t>(s.dataset)});
  }
  return rows;
}

Batch Loader::build(uint64_t consumed, int64_t micro) const { return builder_.build(micro_batch_refs(consumed, micro)); }

void Loader::start_thread() {
  if (capacity_ == 0) return;
  stop_ = false;
  error_ = nullptr;
  queue_.clear();
  thread_ = std::thread([this] { produce(); });
}

void Loader::stop_thread() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  queue_.clear();
}

void Loader::produce() {
  // The producer's own cursor starts where the consumer stands (set before the thread starts).
  uint64_t consumed = consumed_;
  int64_t micro = micro_taken_;
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || queue_.size() < capacity_; });
        if (stop_) return;
      }
      Batch b = build(consumed, micro);
      if (++micro == layout_.micro_num) {
        micro = 0;
        consumed += layout_.global_batch();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;
        queue_.push_back(std::move(b));
      }
      cv_.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

Batch Loader::next() {
  Batch b;
  if (capacity_ == 0) {
    b = build(consumed_, micro_taken_);
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || error_; });
    // Batches built before an error are still handed out in order; the error comes in its place.
    if (queue_.empty()) std::rethrow_exception(error_);
    b = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    cv_.notify_all();
  }
  if (++micro_taken_ == layout_.micro_num) {
    micro_taken_ = 0;
    consumed_ += layout_.global_batch();
  }
  return b;
}

SamplerState Loader::state() const {
  LOOM_ASSERT(micro_taken_ == 0, "Loader::state() in the middle of a step (", micro_taken_, " of ",
              layout_.micro_num, " micro-batches taken)");
  return sampler_.state_at(consumed_);
}

void Loader::restore(const SamplerState& s) {
  stop_thread();
  if (s.seed != sampler_.seed()) {
    log::job_warn("data: the checkpoint's sampler seed ", s.seed, " differs from data.seed ", sampler_.seed(),
              "; continuing with the checkpoint's seed so the order stays the same");
    sampler_ = Sampler(data_.packs_per_dataset(), data_.weights(), s.seed, data_.mixture());
  }
  const SamplerState now = sampler_.state_at(s.consumed_samples);
  if (now.epoch != s.epoch)
    log::job_warn("data: the checkpoint was at epoch ", s.epoch, " but consumed sample ", s.consumed_samples,
              " is in epoch ", now.epoch, " of the current data (", sampler_.epoch_size(), " samples per ",
              sampler_.mixture() == Mixture::kScaled ? "epoch" : "cycle of the proportional mixture",
              "): the training data changed since the checkpoint");
  consumed_ = s.consumed_samples;
  micro_taken_ = 0;
  start_thread();
}

// ---- ValidationSets ----

namespace {
std::vector<PackedDataset> open_valid(const DataOptions& opt) {
  if (opt.valid_folder.empty()) return {};
  return open_datasets(opt.valid_folder, "data.valid_folder", opt.seq_len, opt.verify_checksums);
}
}  // namespace

ValidationSets::ValidationSets(const DataOptions& opt, int64_t rank, int64_t world, const TrainData* train)
    : sets_(open_valid(opt)),
      micro_bsz_(opt.micro_bsz),
      rank_(rank),
      world_(world),
      builder_(opt.seq_len, sets_.empty() ? 0 : sets_.front().shard(0).header().pad_id) {
  LOOM_CHECK(world > 0 && rank >= 0 && rank < world, "rank ", rank, " of world size ", world);
  for (const PackedDataset& s : sets_) {
    if (train) {
      // The same model; validation data may be packed with other bos/eos settings than training's.
      TokenizerInfo a = train->tokenizer();
      const TokenizerInfo b = s.shard(0).tokenizer();
      a.flags = b.flags;
      check_same_tokenizer(a, train->datasets().front().shard(0).bin_path(), b, s.shard(0).bin_path());
    }
    log::info("valid set '", s.name(), "': ", s.num_shards(), " shards, ", format_count(s.num_source_docs()), " docs, ",
              format_count(s.num_tokens()), " tokens, ", format_count(s.num_packs()), " packs, padding ",
              format_percent(static_cast<double>(s.num_padding()), static_cast<double>(s.num_tokens() + s.num_padding())));
  }
}

int64_t ValidationSets::num_micro_batches(size_t set) const {
  const uint64_t per_round = static_cast<uint64_t>(world_ * micro_bsz_);
  return static_cast<int64_t>((sets_[set].num_packs() + per_round - 1) / per_round);
}

std::vector<PackRef> ValidationSets::micro_batch_refs(size_t set, int64_t k) const {
  LOOM_ASSERT(set < sets_.size() && k >= 0 && k < num_micro_batches(set), "validation micro-batch ", k, " of set ",
              set);
  const PackedDataset& d = sets_[set];
  std::vector<PackRef> rows;
  const uint64_t base = static_cast<uint64_t>((k * world_ + rank_) * micro_bsz_);
  for (int64_t i = 0; i < micro_bsz_; ++i) {
    const uint64_t p = base + static_cast<uint64_t>(i);
    if (p >= d.num_packs()) {
      rows.push_back({nullptr, 0, static_cast<int64_t>(set)});
      continue;
    }
    const PackedDataset::Location at = d.locate(p);
    rows.push_back({at.shard, at.pack, static_cast<int64_t>(set)});
  }
  return rows;
}

Batch ValidationSets::micro_batch(size_t set, int64_t k) const {
  return builder_.build(micro_batch_refs(set, k));
}

}  // namespace loom
