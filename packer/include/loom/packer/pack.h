// `loom-pack pack`: writes the packed shard(s) of a PackPlan (pack_plan.h), streaming each pack's
// tokens from the inputs' mmaps in the order the packs are written: memory holds the plan
// (O(documents + packs)), never the tokens.
//
// Output: DIR/NAME.bin (+ .meta), or with max_packs_per_shard > 0 and more packs than that,
// DIR/NAME-00000.bin, DIR/NAME-00001.bin, ... of at most that many packs each. Segment doc ids are
// global over all inputs in every file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/packed_format.h"
#include "loom/packer/inputs.h"
#include "loom/packer/pack_plan.h"

namespace loom::packer {

struct PackOptions {
  uint32_t seq_len = 2048;
  PackStrategy strategy = PackStrategy::kConcat;
  uint64_t seed = 0;
  std::string output_dir;
  std::string name = "packed";
  uint64_t max_packs_per_shard = 0;  // 0: one file
  unsigned threads = 0;              // bestfit's threads (gather, write, check); 0: all cores
};

struct PackReport {
  uint64_t packs = 0, tokens = 0, padding_tokens = 0, documents = 0, truncated_docs = 0;
  double padding_fraction = 0, truncated_fraction = 0;
  std::vector<std::string> outputs;
};

// The folder inside DIR where InternLM inputs are converted; emptied before and after use.
std::string pack_scratch_dir(const PackOptions& options);
// Before anything is written: refuses inputs (shards and the model, `files`: every path the run
// reads) that an output could replace, whatever the number of packs (DIR/NAME.bin and any
// DIR/NAME-NNNNN.bin, with their .meta), or that lie in the scratch folder.
void check_pack_spares_inputs(const std::vector<std::string>& files, const PackOptions& options);
// Output paths for a run of num_packs packs.
std::vector<std::string> pack_output_paths(const PackOptions& options, uint64_t num_packs);
// Writes plan's packs from inputs. The plan must be the one plan_packs() made from these inputs'
// lengths: a bestfit plan's segment_src positions are trusted in release builds (only the shard
// bounds are checked; a debug build also checks each segment against its document); a concat
// plan's shape is checked, and its index is concat's cut walked again from the inputs' lengths.
PackReport write_packs(const ShardSet& inputs, const PackPlan& plan, const PackOptions& options);
// plan_packs() from the inputs' length index, then write_packs().
PackReport pack_shards(const ShardSet& inputs, const PackOptions& options);

}  // namespace loom::packer
