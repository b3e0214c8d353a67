#include "dataset.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "loom/sys.h"
#include "sampler.h"

namespace loom {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace

void DataOptions::validate() const {
  LOOM_CHECK(seq_len > 0, "data.seq_len must be > 0, got ", seq_len);
  LOOM_CHECK(micro_bsz > 0, "data.micro_bsz must be > 0, got ", micro_bsz);
  LOOM_CHECK(micro_num > 0, "data.micro_num must be > 0, got ", micro_num);
  LOOM_CHECK(global_batch_size >= 0, "data.global_batch_size must be >= 0 (0 = off), got ", global_batch_size);
  LOOM_CHECK(prefetch >= 0, "data.prefetch must be >= 0, got ", prefetch);
  LOOM_CHECK(total_steps >= 1, "data.total_steps must be >= 1, got ", total_steps);
  LOOM_CHECK(valid_every >= 0, "data.valid_every must be >= 0, got ", valid_every);
  LOOM_CHECK(!train_folder.empty(), "data.train_folder is not set: give the folder of packed shards to train on");
  parse_dataset_weights(dataset_weights);
  parse_mixture(mixture);
}

std::vector<std::pair<std::string, double>> parse_dataset_weights(const std::string& spec) {
  std::vector<std::pair<std::string, double>> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() && ss.eof()) break;
    const size_t colon = item.rfind(':');
    LOOM_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < item.size(), "data.dataset_weights: '", item,
               "' in \"", spec, "\": expected name:weight, e.g. \"en:2,zh:0.5\"");
    const std::string name = item.substr(0, colon), num = item.substr(colon + 1);
    size_t used = 0;
    double w = -1;
    try {
      w = std::stod(num, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    LOOM_CHECK(used == num.size() && w >= 0 && w < 1e9, "data.dataset_weights: weight '", num, "' of dataset '", name,
               "' in \"", spec, "\": expected a number >= 0");
    for (const auto& [seen, unused] : out)
      LOOM_CHECK(seen != name, "data.dataset_weights: dataset '", name, "' is given twice in \"", spec, "\"");
    out.emplace_back(name, w);
  }
  return out;
}

// ---- PackedDataset ----

namespace {

std::string set_text(const PackedReader& r) {
  const PackedHeader& h = r.header();
  if (h.set_id == 0) return r.bin_path() + " (no output set recorded: an older loom-pack)";
  return str(r.bin_path(), " (output set ", hex64(h.set_id), ", file ", h.shard_index, " of ", h.shard_count, ")");
}

// The dataset's shards are one output set (dataset.h), or all record none.
void check_output_set(const std::string& name, const std::vector<PackedReader>& shards) {
  const PackedReader& first = shards.front();
  const uint64_t id = first.header().set_id;
  for (const PackedReader& r : shards)
    LOOM_CHECK(r.header().set_id == id, "dataset '", name, "' holds the shards of two loom-pack runs: ", set_text(first),
               " and ", set_text(r), "; a pack replaces only the files of its own NAME: remove the stale run's files, "
               "or pack into an empty folder");
  if (id == 0) return;
  const uint32_t count = first.header().shard_count;
  std::vector<std::pair<uint32_t, const PackedReader*>> index;
  for (const PackedReader& r : shards) {
    LOOM_CHECK(r.header().shard_count == count && r.header().shard_index < count, set_text(r), ": disagrees with ",
               set_text(first), " on the number of files of the set");
    index.emplace_back(r.header().shard_index, &r);
  }
  std::sort(index.begin(), index.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < index.size(); ++i) {
    LOOM_CHECK(i == 0 || index[i].first != index[i - 1].first, "dataset '", name, "': ", set_text(*index[i - 1].second),
               " and ", set_text(*index[i].second), " are the same file of one output set (a copy?)");
    LOOM_CHECK(index[i].first == i, "dataset '", name, "': output set ", hex64(id), " is incomplete: file ", i, " of ",
               count, " is missing (", shards.size(), " of its files are here, e.g. ", set_text(first),
               "); a pack that did not finish? pack again");
  }
  LOOM_CHECK(index.size() == count, "dataset '", name, "': output set ", hex64(id), " is incomplete: files ",
             index.size(), " to ", count - 1, " of ", count, " are missing (", set_text(first), "); pack again");
}

}  // namespace

PackedDataset::PackedDataset(std::string name, const std::vector<std::string>& shard_paths, int64_t seq_len)
    : name_(std::move(name)), seq_len_(seq_len) {
  shards_.reserve(shard_paths.size());
  for (const std::string& path : shard_paths) {
    shards_.emplace_back(path);
    const PackedReader& r = shards_.back();
    LOOM_CHECK(static_cast<int64_t>(r.seq_len()) == seq_len, path, ": packs of ", r.seq_len(),
               " tokens, but data.seq_len is ", seq_len, " (repack the data or set data.seq_len=", r.seq_len(), ")");
    if (shards_.size() > 1) check_same_tokenizer(shards_.front(), r);
    first_pack_.push_back(first_pack_.back() + r.num_packs());
    num_tokens_ += r.header().num_tokens;
    num_source_docs_ += r.header().num_source_docs;
  }
  LOOM_ASSERT(!shards_.empty(), "dataset '", name_, "' without shards");
  check_output_set(name_, shards_);
}

void verify_checksums(const std::vector<PackedDataset>& datasets, int rank, int world, unsigned threads) {
  LOOM_ASSERT(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " of ", world);
  std::vector<const PackedReader*> mine;  // this rank's share, in shard order
  uint64_t i = 0, bytes = 0;
  for (const PackedDataset& d : datasets)
    for (size_t s = 0; s < d.num_shards(); ++s, ++i)
      if (i % static_cast<uint64_t>(world) == static_cast<uint64_t>(rank)) {
        mine.push_back(&d.shard(s));
        bytes += d.shard(s).bin().size();
      }
  if (mine.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t cores = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  const size_t n = std::min(cores, mine.size());
  std::vector<std::string> errors(mine.size());
  std::atomic<size_t> next{0}, first_bad{SIZE_MAX};
  // Every shard before the first bad one is checked, so the failure reported is the first in order.
  const auto work = [&] {
    for (size_t k = next++; k < mine.size(); k = next++) {
      if (k > first_bad.load()) continue;
      try {
        mine[k]->verify_deep();
      } catch (const std::exception& e) {
        errors[k] = e.what();
        for (size_t b = first_bad.load(); k < b && !first_bad.compare_exchange_weak(b, k);) {}
      }
    }
  };
  {
    std::vector<std::thread> pool;
    struct Join {
      std::vector<std::thread>& pool;
      ~Join() {
        for (std::thread& t : pool) t.join();
      }
    } join{pool};
    for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
    work();
  }
  for (const std::string& e : errors)
    if (!e.empty())
      LOOM_FAIL(e, " (data.verify_checksums=false skips this check at start",
                world > 1 ? str("; rank ", rank, " of ", world, " checks this shard") : std::string(), ")");
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  log::info("data: checksums of ", mine.size(), " shards (", format_count(bytes), " bytes", world > 1 ? ", this rank's share" : "",
            ") verified on ", n, " threads in ", format_number(took.count(), 3), " s");
}

PackedDataset::Location PackedDataset::locate(uint64_t pack) const {
  LOOM_ASSERT(pack < num_packs(), "pack ", pack, " of dataset '", name_, "' with ", num_packs(), " packs");
  const auto it = std::upper_bound(first_pack_.begin(), first_pack_.end(), pack);
  const size_t s = static_cast<size_t>(it - first_pack_.begin() - 1);
  return {&shards_[s], pack - first_pack_[s]};
}

std::vector<PackedDataset> open_datasets(const std::string& folder_in, const std::string& key, int64_t seq_len,
                                         bool verify_checksums, int rank, int world) {
  std::string folder = folder_in;
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
  LOOM_CHECK(sys::is_directory(folder), key, " = ", folder, ": not a folder (expected a folder of packed shards)");
  std::vector<std::string> top;                            // shards directly in the folder
  std::map<std::string, std::vector<std::string>> groups;  // sub-folder name -> its shards (sorted)
  for (const std::string& path : sys::list_files(folder)) {
    if (ends_with(path, ".bin.meta")) {
      const std::string bin = path.substr(0, path.size() - 5);
      LOOM_CHECK(sys::exists(bin), path, ": index without its data file ", bin, " (an incomplete shard?)");
      continue;
    }
    if (!ends_with(path, ".bin")) continue;
    LOOM_CHECK(sys::exists(meta_path_for(path)), path, ": no ", meta_path_for(path),
               " beside it (an incomplete or unpacked shard?)");
    const std::string rel = path.substr(folder.size() + 1);
    const size_t slash = rel.find('/');
    if (slash == std::string::npos) top.push_back(path);
    else groups[rel.substr(0, slash)].push_back(path);
  }
  LOOM_CHECK(!top.empty() || !groups.empty(), key, " = ", folder,
             ": no packed shards (NAME.bin with NAME.bin.meta) in it; run loom-pack pack first");
  LOOM_CHECK(top.empty() || groups.empty(), key, " = ", folder, ": holds shards both directly (", top.front(),
             ") and in sub-folders (", groups.begin()->second.front(),
             "); put each dataset in its own sub-folder, or all shards in the folder itself");
  std::vector<PackedDataset> out;
  if (!top.empty()) {
    out.emplace_back(sys::basename(folder), top, seq_len);
  } else {
    out.reserve(groups.size());
    for (const auto& [name, paths] : groups) out.emplace_back(name, paths, seq_len);
  }
  for (size_t d = 1; d < out.size(); ++d) check_same_tokenizer(out.front().shard(0), out[d].shard(0));
  if (verify_checksums) loom::verify_checksums(out, rank, world);
  return out;
}

// ---- TrainData ----

TrainData::TrainData(const DataOptions& opt, int rank, int world)
    : datasets_(open_datasets(opt.train_folder, "data.train_folder", opt.seq_len, opt.verify_checksums, rank, world)),
      mixture_(parse_mixture(opt.mixture)) {
  tokenizer_ = datasets_.front().shard(0).tokenizer();
  pad_id_ = datasets_.front().shard(0).header().pad_id;
  for (const auto& [name, weight] : parse_dataset_weights(opt.dataset_weights)) {
    PackedDataset* found = nullptr;
    for (PackedDataset& d : datasets_)
      if (d.name() == name) found = &d;
    if (!found) {
      std::string names;
      for (const PackedDataset& d : datasets_) names += (names.empty() ? "" : ", ") + d.name();
      LOOM_FAIL("data.dataset_weights: no dataset '", name, "' in ", opt.train_folder, " (datasets: ", names, ")");
    }
    found->set_weight(weight);
  }
  double total = 0;
  for (const PackedDataset& d : datasets_) {
    total += d.weight();
    LOOM_CHECK(mixture_ == Mixture::kScaled || d.weight() == 0 || d.num_packs() > 0, "data.dataset_weights: dataset '",
               d.name(), "' has weight ", format_number(d.weight()), " but no packs");
  }
  LOOM_CHECK(mixture_ == Mixture::kScaled ? epoch_samples() > 0 : total > 0,
             "data.dataset_weights: every dataset has weight 0; nothing to train on");
  if (mixture_ == Mixture::kProportional) {
    try {
      BlendCycle shares_fit(weights());  // a share too small for the cycle: refused here, with the keys' text
    } catch (const Error& e) {
      LOOM_FAIL("data.dataset_weights \"", opt.dataset_weights, "\" with data.mixture=proportional: ", e.what());
    }
  }
}

std::vector<double> TrainData::shares() const {
  std::vector<double> out;
  double total = 0;
  for (const PackedDataset& d : datasets_) {
    const bool scaled = mixture_ == Mixture::kScaled;
    out.push_back(scaled ? static_cast<double>(weighted_count(d.num_packs(), d.weight())) : d.weight());
    total += out.back();
  }
  for (double& x : out) x /= total;
  return out;
}

std::vector<std::string> TrainData::dataset_names() const {
  std::vector<std::string> out;
  for (const PackedDataset& d : datasets_) out.push_back(d.name());
  return out;
}

std::vector<uint64_t> TrainData::packs_per_dataset() const {
  std::vector<uint64_t> out;
  for (const PackedDataset& d : datasets_) out.push_back(d.num_packs());
  return out;
}

std::vector<double> TrainData::weights() const {
  std::vector<double> out;
  for (const PackedDataset& d : datasets_) out.push_back(d.weight());
  return out;
}

uint64_t TrainData::epoch_samples() const {
  if (mixture_ != Mixture::kScaled) return 0;
  uint64_t n = 0;
  for (const PackedDataset& d : datasets_) n += weighted_count(d.num_packs(), d.weight());
  return n;
}

void TrainData::log_summary(uint64_t global_batch, int64_t total_steps) const {
  LOOM_ASSERT(global_batch > 0, "global batch of 0 packs");
  const double g = static_cast<double>(global_batch);
  const std::vector<double> share = shares();
  for (size_t i = 0; i < datasets_.size(); ++i) {
    const PackedDataset& d = datasets_[i];
    std::string use;
    if (mixture_ == Mixture::kScaled) {
      const uint64_t samples = weighted_count(d.num_packs(), d.weight());
      use = str("weight ", format_number(d.weight()), " -> ", format_count(samples), " samples per epoch = ",
                fixed(static_cast<double>(samples) / g, 2), " steps, share ", format_percent(share[i], 1.0));
    } else {
      // The proportional mixture reads each dataset in epochs of its own (sampler.h).
      const double packs = static_cast<double>(std::max<uint64_t>(d.num_packs(), 1));
      const double epochs = share[i] * g * static_cast<double>(total_steps) / packs;
      use = str("weight ", format_number(d.weight()), " -> share ", format_percent(share[i], 1.0), " of every batch = ",
                fixed(share[i] * g, 2), " packs per step; data.total_steps ", total_steps, " = ", fixed(epochs, 3),
                " epochs of it");
      if (d.weight() > 0 && epochs > kManyEpochs)
        log::job_warn("dataset '", d.name(), "': data.total_steps ", total_steps, " repeats it ", fixed(epochs, 1),
                      " times: past about ", kManyEpochs, " epochs repeated data is worth much less than new data");
    }
    log::info("dataset ", i, " '", d.name(), "': ", d.num_shards(), " shards, ", format_count(d.num_source_docs()), " docs, ",
              format_count(d.num_tokens()), " tokens, ", format_count(d.num_packs()), " packs, padding ",
              format_percent(static_cast<double>(d.num_padding()), static_cast<double>(d.num_tokens() + d.num_padding())),
              ", ", use);
  }
  if (mixture_ != Mixture::kScaled) {
    log::info("train data: data.mixture=proportional, global batch ", format_count(global_batch), " packs");
    return;
  }
  const uint64_t n = epoch_samples();
  const double steps_per_epoch = static_cast<double>(n) / g;
  const double epochs = static_cast<double>(total_steps) * g / static_cast<double>(n);
  log::info("train data: data.mixture=scaled, ", format_count(n), " samples per epoch, global batch ",
            format_count(global_batch), " packs -> ", fixed(steps_per_epoch, 2), " steps per epoch; data.total_steps ",
            total_steps, " = ", fixed(epochs, 3), " epochs");
  if (epochs < 1.0)
    log::job_warn("data.total_steps ", total_steps, " covers only ", format_percent(epochs, 1.0), " of one epoch (",
              fixed(steps_per_epoch, 1), " steps): part of the training data is never seen");
  else if (epochs > kManyEpochs)
    log::job_warn("data.total_steps ", total_steps, " repeats the data ", fixed(epochs, 1),
              " times: past about ", kManyEpochs, " epochs repeated data is worth much less than new data");
}

std::string mixture_line(int64_t first_step, int64_t last_step, const std::vector<std::string>& names,
                         const std::vector<uint64_t>& counts) {
  LOOM_ASSERT(names.size() == counts.size(), counts.size(), " counts for ", names.size(), " datasets");
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  std::string out = first_step == last_step ? str("data mix step ", first_step, ":")
                                            : str("data mix steps ", first_step, "-", last_step, ":");
  for (size_t d = 0; d < names.size(); ++d)
    out += " " + names[d] + " " +
           fixed(total ? 100.0 * static_cast<double>(counts[d]) / static_cast<double>(total) : 0.0, 1) + "%";
  return out;
}

}  // namespace loom
