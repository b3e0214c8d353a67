// `loom-pack pack`: writes the packed shard(s) of a PackPlan (pack_plan.h), streaming each pack's
// tokens from the inputs' mmaps in the order the packs are written: memory holds the plan
// (O(documents + packs)), never the tokens.
//
// Output: DIR/NAME.bin (+ .meta), or with max_packs_per_shard > 0 and more packs than that,
// DIR/NAME-00000.bin, DIR/NAME-00001.bin, ... of at most that many packs each. Segment doc ids are
// global over all inputs in every file.
//
// The files of one run are an output set: each header records the set (set_id, shard_index,
// shard_count), and the set replaces the previous one of the same NAME as a whole. Every file is
// written and fsynced under a temporary name first; once all inputs passed their check, the
// previous set's files (output_set_files) that the new set does not overwrite are removed, then
// the new files are renamed into place and the folder fsynced. A run that fails before leaves the
// previous set as it was; a run killed in between leaves a mixed or incomplete set, which
// loom-train refuses by its headers (and a rerun replaces).
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

// The folder inside which pack makes its scratch folder (InternlmAsLoom's, a fresh unique name):
// DIR itself.
std::string pack_scratch_parent(const PackOptions& options);
// The files of DIR that belong to an output set of NAME, whichever run wrote them: NAME.bin and
// NAME-NNNNN.bin (5 or more digits), and their .meta, those that exist. A run replaces them all.
std::vector<std::string> output_set_files(const PackOptions& options);
// Before anything is written: refuses inputs (shards and the model, `files`: every path the run
// reads) that an output could replace, whatever the number of packs (DIR/NAME.bin and any
// DIR/NAME-NNNNN.bin, with their .meta).
void check_pack_spares_inputs(const std::vector<std::string>& files, const PackOptions& options);
// The set_id of a run's output set (packed_format.h): XXH64 of the settings that shape the output
// (format version, seq_len, strategy, seed, max_packs_per_shard, the number of files, NAME) and of
// each input's identity (documents, tokens, .bin and offsets checksums); never 0. Two runs share
// it only when they write the same files, so a rerun is byte for byte the same.
uint64_t output_set_id(const ShardSet& inputs, const PackOptions& options, uint64_t num_files);
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
