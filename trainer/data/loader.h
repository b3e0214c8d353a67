// Feeding the loop: the train Loader (sampler + batch builder on a prefetch thread), the
// BatchSkipper of data.skip_batches, and the named validation sets.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "batch.h"
#include "batch_builder.h"
#include "dataset.h"
#include "sampler.h"

namespace loom {

// InternLM's BatchSkipper: data.skip_batches = "a-b,c" names steps (0-based global batch indices,
// ranges inclusive, ascending, not overlapping) whose data is consumed but whose update is skipped,
// to step over a batch known to make the loss spike.
class BatchSkipper {
 public:
  explicit BatchSkipper(const std::string& spec);  // "" = skip nothing; throws loom::Error when malformed
  bool should_skip(int64_t step) const;
  const std::vector<std::pair<int64_t, int64_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // [first, last], sorted
};

// This rank's micro-batches, in order, built ahead on one thread (bounded by data.prefetch) so the
// loop does not wait on data. Every call of next() returns the next micro-batch of the current step;
// after data.micro_num calls the step's global batch is consumed and state() moves past it.
// Destroying the loader stops and joins the thread.
class Loader {
 public:
  // data must outlive the loader. Starts at sample 0 with data.seed; restore() moves to a checkpoint.
  Loader(const TrainData& data, const DataOptions& opt, int64_t rank, int64_t world);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // This rank's next micro-batch. Rethrows an error of the prefetch thread (e.g. a corrupt id).
  Batch next();
  // The position after the last whole step handed out by next(); only meaningful between steps.
  SamplerState state() const;
  // Continues from s (possibly saved at another world size): drops the prefetched batches. s.seed
  // wins over data.seed (with a warning), so a resumed run continues the same order.
  void restore(const SamplerState& s);
  bool should_skip(int64_t step) const { return skipper_.should_skip(step); }

  const Sampler& sampler() const { return sampler_; }
  const BatchLayout& layout() const { return layout_; }
  // The refs of this rank's micro-step `micro` of the step starting at `consumed` (for tests and logs).
  std::vector<PackRef> micro_batch_refs(uint64_t consumed, int64_t micro) const;

 private:
  void start_thread();
  void stop_thread();
  void produce();
  Batch build(uint64_t consumed, int64_t micro) const;

  const TrainData& data_;
  BatchLayout layout_;
  int64_t rank_;
  Sampler sampler_;
  BatchBuilder builder_;
  BatchSkipper skipper_;
  size_t capacity_;

  // Consumer side: the step being handed out.
  uint64_t consumed_ = 0;
  int64_t micro_taken_ = 0;

  // Producer side, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

// The named validation sets of data.valid_folder (each sub-folder one set; a folder holding shards
// directly is one set named after it). Each set is read in shard order, never shuffled. Rank r's
// micro-batch k holds packs [(k*W + r)*B, (k*W + r + 1)*B) of the set; every rank gets the same
// number of micro-batches, ceil(packs / (W*B)), rows past the end being all padding (no loss), so
// collective ops stay in step and every pack is evaluated exactly once.
class ValidationSets {
 public:
  // train: when given, each valid shard must share its tokenizer.
  ValidationSets(const DataOptions& opt, int64_t rank, int64_t world, const TrainData* train = nullptr);

  size_t num_sets() const { return sets_.size(); }
  const std::string& name(size_t set) const { return sets_[set].name(); }
  const PackedDataset& set(size_t set) const { return sets_[set]; }
  int64_t num_micro_batches(size_t set) const;
  // dataset_ids of its rows hold `set`.
  Batch micro_batch(size_t set, int64_t k) const;
  std::vector<PackRef> micro_batch_refs(size_t set, int64_t k) const;

 private:
  std::vector<PackedDataset> sets_;
  int64_t micro_bsz_, rank_, world_;
  BatchBuilder builder_;
};

}  // namespace loom
