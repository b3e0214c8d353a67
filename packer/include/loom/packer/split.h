// `loom-pack split`: a deterministic train/valid split by document. Each input NAME.bin becomes
// DIR/train/NAME.bin and DIR/valid/NAME.bin (a side with no document is not written).
//
// Document d (global index: inputs in command-line order) gets the score
// XXH64(seed as u64 LE, d as u64 LE; seed 0). With --valid-fraction F it goes to valid iff
// score < F * 2^64, so a document's side never depends on the other documents; with --valid-docs N
// the N documents of smallest (score, d) go to valid. Both keep each side in input order.
#pragma once

#include <cstdint>
#include <string>

#include "loom/packer/inputs.h"

namespace loom::packer {

struct SplitOptions {
  double valid_fraction = -1;  // used when >= 0
  int64_t valid_docs = -1;     // used when >= 0
  int64_t min_valid_docs = 0;  // with valid_fraction: at least this many, while train keeps one
  uint64_t seed = 0;
  std::string output_dir;
};

struct SplitReport {
  uint64_t train_docs = 0, valid_docs = 0, train_tokens = 0, valid_tokens = 0;
};

uint64_t split_score(uint64_t seed, uint64_t doc);
SplitReport split_shards(const ShardSet& inputs, const std::vector<std::string>& input_paths,
                         const SplitOptions& options);

}  // namespace loom::packer
