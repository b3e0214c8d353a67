// loom-dedup: exact and near-duplicate removal and decontamination of token shards, as stages that
// run in one process or as separate processes over partitions (docs/DEDUP.md):
//
//   signatures  per source (reference set or input): its documents' MinHash signatures, their band
//               keys and exact keys (each band's keys sorted on disk), and its contaminated documents
//   buckets     per band: the sources' keys of that band merged; documents sharing a key become
//               candidate pairs (star edges to the smallest document id), optionally verified
//   clusters    one process: connected components of every band's pairs (external sorts), the
//               documents removed and why, the report (report.jsonl) and the summary (summary.json)
//   apply       per input: the kept documents written to the output folder in the input's format
//
// Every stage's output is written atomically and records what it was made from; a stage whose
// outputs exist with the same provenance and check is skipped, so a killed run is rerun as it was.
// The result depends only on the sources, their order and the settings: not on threads or tasks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/dedup/eval_set.h"
#include "loom/dedup/minhash.h"

namespace loom::dedup {

enum class Keep { kFirst, kNone };
enum class Stage { kAll, kSignatures, kBuckets, kClusters, kApply };
// A stage's share of the work: task `task` of `tasks` (sources, bands or inputs round-robin or in
// ranges; the union over the tasks is the whole stage).
struct StageTask {
  uint32_t task = 0, tasks = 1;
};

struct DedupOptions {
  std::vector<std::string> inputs;      // shard .bin paths, in order
  std::vector<std::string> references;  // shard .bin paths: match, never written or removed
  std::string work_dir, output_dir;
  MinHashParams minhash;
  bool near = true;         // false: exact duplicates only
  Keep keep = Keep::kFirst;
  bool verify = false;      // candidate pairs of the near bands kept only at exact Jaccard >= threshold
  double threshold = 0.7;
  EvalOptions eval;         // no files: no decontamination
  bool remove_contaminated = true;  // false: contaminated documents are only reported
  uint32_t threads = 1;
  uint64_t memory_bytes = uint64_t{1} << 30;  // the external sorts' buffers, in all
};

void run_stage(const DedupOptions& options, Stage stage, StageTask task);

// Reasons of a removal record (work_file.h, kind 5).
enum class Reason : uint64_t { kExact = 1, kNear = 2, kContaminated = 3, kContaminatedReported = 4 };
const char* reason_name(Reason r);

}  // namespace loom::dedup
