// What every stage of loom-dedup shares: the sources opened and checked, the work folder's file
// names, and the provenance (params_xxh64) of each work file.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/dedup/dedup.h"
#include "loom/dedup/sources.h"
#include "loom/dedup/work_file.h"

namespace loom::dedup {

// A removal record (work file kind 5): 8 u64.
struct Removal {
  uint64_t doc, matched, reason, item, position, length;
  double estimate, jaccard;  // jaccard: NaN when not verified
};
static_assert(sizeof(Removal) == 64, "a removal record is 64 bytes on disk");
// A contamination record (kind 4).
struct Contamination {
  uint64_t doc, item, position;
};
static_assert(sizeof(Contamination) == 24, "a contamination record is 24 bytes on disk");

class Job {
 public:
  explicit Job(const DedupOptions& options);
  const DedupOptions& options() const { return o_; }
  size_t num_sources() const { return sources_.size(); }
  const Source& source(size_t s) const { return *sources_[s]; }
  bool is_reference(size_t s) const { return s < o_.references.size(); }
  // Whether doc names a document of the sources (one compare each: checked per work file record).
  bool has_doc(uint64_t doc) const {
    const uint64_t s = doc_source(doc);
    return s < num_docs_.size() && doc_index(doc) < num_docs_[s];
  }
  // Band units: 0..bands-1 the MinHash bands (when near), `bands` the exact key.
  std::vector<uint32_t> units() const;
  uint32_t exact_unit() const { return o_.minhash.bands; }
  uint32_t sig_record_bytes() const { return 8 * (3 + o_.minhash.num_hashes()); }

  std::string sig_path(size_t s) const;
  std::string band_path(size_t s, uint32_t unit) const;
  std::string contam_path(size_t s) const;
  std::string edges_path(uint32_t unit) const;
  std::string removals_path() const { return o_.work_dir + "/removals.bin"; }
  std::string report_path() const { return o_.work_dir + "/report.jsonl"; }
  std::string summary_path() const { return o_.work_dir + "/summary.json"; }
  std::string apply_stamp_path(size_t s) const;
  std::string output_path(size_t s) const;

  uint64_t sig_params(size_t s) const;
  // The eval set's fingerprint is an argument: only stages that load the set know it.
  uint64_t contam_params(size_t s, uint64_t eval_fingerprint) const;
  bool decontaminating() const { return !o_.eval.files.empty(); }

  // The header of a finished work file of an earlier stage; throws naming the stage to run first.
  WorkHeader finished(const std::string& path, WorkKind kind, uint32_t record_bytes, const char* stage) const;
  // finished(), and made from these sources and settings (params); else throws naming the stage to rerun.
  WorkHeader current(const std::string& path, WorkKind kind, uint32_t record_bytes, const char* stage,
                     uint64_t params) const;

 private:
  DedupOptions o_;
  std::vector<std::unique_ptr<Source>> sources_;
  std::vector<uint64_t> num_docs_;  // per source
  std::vector<std::string> names_;
  uint64_t settings_ = 0;
};

uint64_t mix_hash(std::initializer_list<uint64_t> values);

// The ids and order in work files are outside bytes (the work folder may be shared): each stage
// checks every record it reads, in the pass that verifies the file's checksum, and refuses the
// file (LOOM_CHECK) naming it, the record and what was expected. Then no id indexes out of range.
//
// The signatures of source s, made by this run's signatures stage (Job::current), one record per
// document of the source.
std::unique_ptr<WorkReader> open_signatures(const Job& job, size_t s);
// Band keys of source s: documents of s, sorted by key, then document.
void verify_band_keys(const Job& job, const WorkReader& file, size_t s);
// Edges: documents of the job's sources, a < b.
void verify_edges(const Job& job, const WorkReader& file);
// Contamination of input s: documents of s in increasing order, eval items < num_items.
void verify_contamination(const Job& job, const WorkReader& file, size_t s, uint64_t num_items);
// Removals: documents of the inputs in increasing order (a document reported as contaminated may
// come again, as a duplicate), a reason of 1 to 4, a matched document of the job's sources for
// exact and near (kNoDoc for the others), the document's length; eval items < num_items unless
// that is kNoDoc (a stage that does not read them).
void verify_removals(const Job& job, const WorkReader& file, uint64_t num_items);

// The params_xxh64 of a band's edges file, and of the removals file: what the next stage checks
// its inputs against.
uint64_t bucket_params(const Job& job, uint32_t unit);
uint64_t removals_params(const Job& job);

void run_signatures(const Job& job, StageTask task);
void run_buckets(const Job& job, StageTask task);
void run_clusters(const Job& job);
void write_report(const Job& job);
void run_apply(const Job& job, StageTask task);

// Runs f(i) for i in [0, n) on `threads` threads, each taking the next i; the first exception is
// rethrown after all have stopped.
void parallel_for(uint32_t threads, size_t n, const std::function<void(size_t)>& f);

}  // namespace loom::dedup
