// Training data: a folder of packed shards (written by `loom-pack pack`), opened, checked and
// summarised at start.
//
// Folder layout. Each sub-folder of a data folder is one named dataset (InternLM's type ids): its
// id is its rank in sorted name order, and its shards are every NAME.bin (with NAME.bin.meta) found
// under it, recursively, in sorted path order. A folder that holds shards directly and no
// sub-folders with shards is one dataset named after the folder itself. Shards both directly in the
// folder and in sub-folders are refused (which dataset would they be?). Other files are ignored.
//
// Token ids. Packed shards store uint16/uint32 ids, so the negative ids of InternLM's SFT convention
// ("input without loss") cannot occur in loom's data: there is nothing to translate. Every id is
// checked < vocab_size when a batch is built (and, with data.verify_checksums, at start).
//
// Output sets. A dataset is what one `loom-pack pack` run wrote: its shards' headers name their
// set (set_id, shard_index, shard_count; packed_format.h). Shards of two sets (two runs, e.g. a
// stale NAME-00003.bin beside a newer NAME.bin) are refused, naming a file of each; so is a set
// missing a file or holding one twice. Shards that record no set (set_id 0, older loom-pack) are
// accepted as before when all of the dataset's shards are such.
//
// Checksums. With data.verify_checksums (the default) every shard's .bin is read once, front to
// back, at start: ids against the vocab and its XXH64 against the .meta's bin_xxh64
// (PackedReader::verify_deep, the check of `loom-pack verify`). The shards are split among the
// ranks (shard i, over all datasets in order, is checked by rank i % world) and each rank checks
// its share on all its cores, one shard per thread. A mismatch is a loom::Error naming the file
// and both checksums, raised on the rank that found it (the first bad shard in order when there
// are several), which reports it to the others as any start-up failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/packed_format.h"
#include "sampler.h"

namespace loom {

// The [data] section (config.h registers the keys under these names).
struct DataOptions {
  int64_t seq_len = 2048;         // data.seq_len: T; must equal every packed shard's seq_len
  int64_t micro_bsz = 1;          // data.micro_bsz: B, packs per micro-batch
  int64_t micro_num = 1;          // data.micro_num: M, micro-batches per step (gradient accumulation)
  int64_t global_batch_size = 0;  // data.global_batch_size: packs per step; > 0 derives micro_num at launch
  std::string train_folder;       // data.train_folder
  std::string valid_folder;       // data.valid_folder ("" = no validation)
  uint64_t seed = 1024;           // data.seed: the sampler's seed (InternLM's default seed)
  std::string skip_batches;       // data.skip_batches: "a-b,c" steps whose data is consumed without update
  int64_t prefetch = 4;           // data.prefetch: micro-batches built ahead by the loader thread (0 = none)
  std::string dataset_weights;    // data.dataset_weights: "name:weight,..." (unlisted datasets weigh 1)
  std::string mixture = "scaled";  // data.mixture: what a weight means, scaled or proportional (sampler.h)
  bool verify_checksums = true;   // data.verify_checksums: read every shard fully at start (ids, xxh64)
  int64_t total_steps = 100;      // data.total_steps: optimizer steps of the run (read by the loop)
  int64_t valid_every = 0;        // data.valid_every: steps between validations (0 = only at the end)
  int64_t valid_micro_num = 0;    // data.valid_micro_num: micro-batches per set and validation (0 = all)
  std::string tokenizer;          // data.tokenizer: the SentencePiece .model of the data ("" = not recorded)

  // Throws loom::Error naming the key of the first bad value.
  void validate() const;
};

// One named dataset: its shards, seen as one array of packs (shard by shard, in sorted path order).
class PackedDataset {
 public:
  // Opens and checks the shards' headers and indexes, and that they form one output set; the
  // checksums are verify_checksums()'s.
  PackedDataset(std::string name, const std::vector<std::string>& shard_paths, int64_t seq_len);

  const std::string& name() const { return name_; }
  double weight() const { return weight_; }
  void set_weight(double w) { weight_ = w; }
  size_t num_shards() const { return shards_.size(); }
  const PackedReader& shard(size_t i) const { return shards_[i]; }
  uint64_t num_packs() const { return first_pack_.back(); }
  uint64_t num_tokens() const { return num_tokens_; }          // tokens inside segments
  uint64_t num_padding() const { return num_packs() * static_cast<uint64_t>(seq_len_) - num_tokens_; }
  uint64_t num_source_docs() const { return num_source_docs_; }

  struct Location {
    const PackedReader* shard;
    uint64_t pack;  // within that shard
  };
  Location locate(uint64_t pack) const;

 private:
  std::string name_;
  int64_t seq_len_;
  double weight_ = 1.0;
  std::vector<PackedReader> shards_;
  std::vector<uint64_t> first_pack_{0};  // first_pack_[i] = packs before shard i; back() = total
  uint64_t num_tokens_ = 0, num_source_docs_ = 0;
};

// Opens every dataset of a folder (layout above), checking each shard's header and index
// (PackedReader), its seq_len against seq_len, that all shards share one tokenizer and that each
// dataset is one output set; with verify_checksums, this rank's share of the checksums
// (verify_checksums()). key names the option the folder came from, for messages ("data.train_folder").
std::vector<PackedDataset> open_datasets(const std::string& folder, const std::string& key, int64_t seq_len,
                                         bool verify_checksums, int rank = 0, int world = 1);

// Checks the .bin of the shards i (over all datasets, in order) with i % world == rank
// (PackedReader::verify_deep) on up to `threads` threads (0: the machine's cores). Throws the
// first failure in shard order, whatever the threads' timing.
void verify_checksums(const std::vector<PackedDataset>& datasets, int rank, int world, unsigned threads = 0);

// The training datasets of data.train_folder with their weights.
class TrainData {
 public:
  // rank and world split the checksum pass (verify_checksums()).
  explicit TrainData(const DataOptions& opt, int rank = 0, int world = 1);

  const std::vector<PackedDataset>& datasets() const { return datasets_; }
  std::vector<std::string> dataset_names() const;
  std::vector<uint64_t> packs_per_dataset() const;
  std::vector<double> weights() const;
  Mixture mixture() const { return mixture_; }
  // Each dataset's share of the stream: weight-scaled sizes (scaled) or normalised weights (proportional).
  std::vector<double> shares() const;
  const TokenizerInfo& tokenizer() const { return tokenizer_; }
  uint32_t vocab_size() const { return tokenizer_.vocab_size; }
  uint32_t pad_id() const { return pad_id_; }
  // Samples per epoch with the weights applied (the sampler's N; scaled mixture only, 0 otherwise).
  uint64_t epoch_samples() const;

  // Logs, per dataset: weight, docs (num_source_docs), tokens, packs, padding, its share of the stream,
  // and with the scaled mixture its samples and steps per epoch for a global batch of `global_batch`
  // packs, with the proportional one the epochs of it that total_steps reads; then (scaled) the
  // realised epochs of total_steps, with a warning when that is under one epoch or more than kManyEpochs.
  void log_summary(uint64_t global_batch, int64_t total_steps) const;
  // Past ~4 epochs repeated data is worth clearly less than new data (Muennighoff et al. 2023).
  static constexpr double kManyEpochs = 4.0;

 private:
  std::vector<PackedDataset> datasets_;
  Mixture mixture_ = Mixture::kScaled;
  TokenizerInfo tokenizer_;
  uint32_t pad_id_ = 0;
};

// "name:weight,name:weight" -> pairs, in order. Throws loom::Error on malformed text.
std::vector<std::pair<std::string, double>> parse_dataset_weights(const std::string& spec);

// The realised mixture of a window of steps, one short line: "data mix steps 11-20: web 75.0% code 25.0%"
// (each dataset's share of the window's samples, counts from Sampler::count_datasets).
std::string mixture_line(int64_t first_step, int64_t last_step, const std::vector<std::string>& names,
                         const std::vector<uint64_t>& counts);

}  // namespace loom
