// The buckets stage: per band, the sources' sorted band keys merged; each run of one key is a
// bucket whose documents are paired with its smallest document (a star: the fewest pairs that
// connect the bucket). Pairs of two reference documents are dropped; the exact band's pairs are
// kept only when lengths and both exact hashes agree; with --verify a near band's pairs only at
// exact Jaccard >= the threshold.
#include <cstring>

#include "job.h"
#include "loom/dedup/external_sort.h"
#include "loom/log.h"
#include "loom/progress.h"

namespace loom::dedup {

namespace {
struct Signatures {
  std::vector<std::unique_ptr<WorkReader>> files;  // per source, one record per document (open_signatures)
  const uint64_t* row(uint64_t doc) const {  // doc: from a checked band keys file (verify_band_keys)
    LOOM_DASSERT(doc_source(doc) < files.size() && doc_index(doc) < files[doc_source(doc)]->num_records(), "document ",
                 doc, " out of range");
    return files[doc_source(doc)]->record(doc_index(doc));
  }
};

class Verifier {
 public:
  Verifier(const Job& job, const Signatures& sigs, bool exact) : job_(job), sigs_(sigs), exact_(exact) {}
  bool keep(uint64_t first, uint64_t other) {
    const uint64_t *a = sigs_.row(first), *b = sigs_.row(other);
    if (exact_) return a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
    if (!job_.options().verify) return true;
    if (first != cached_) {
      job_.source(doc_source(first)).read_doc(doc_index(first), ids_);
      shingles(ids_.data(), ids_.size(), job_.options().minhash.ngram, first_shingles_);
      cached_ = first;
    }
    job_.source(doc_source(other)).read_doc(doc_index(other), ids_);
    shingles(ids_.data(), ids_.size(), job_.options().minhash.ngram, other_shingles_);
    return exact_jaccard(first_shingles_, other_shingles_) >= job_.options().threshold;
  }

 private:
  const Job& job_;
  const Signatures& sigs_;
  bool exact_;
  uint64_t cached_ = kNoDoc;
  std::vector<uint32_t> ids_;
  std::vector<uint64_t> first_shingles_, other_shingles_;
};

void bucket_unit(const Job& job, uint32_t unit, const Signatures& sigs, uint64_t params, uint64_t memory) {
  std::vector<PairStream> streams;
  uint64_t total = 0;
  for (size_t s = 0; s < job.num_sources(); ++s) {
    const WorkReader band(job.band_path(s, unit), WorkKind::kBandKeys, sizeof(Pair));
    verify_band_keys(job, band, s);
    streams.emplace_back(band.path(), sizeof(WorkHeader), band.num_records());
    total += band.num_records();
  }
  PairMerge keys(std::move(streams));
  PairSorter edges(job.edges_path(unit), memory, true);
  Verifier verifier(job, sigs, unit == job.exact_unit());
  Progress progress(str("buckets of band ", unit == job.exact_unit() ? std::string("exact") : str(unit)), total, "keys");
  uint64_t key = 0, first = kNoDoc;
  for (; !keys.done(); keys.next()) {
    const Pair p = keys.head();
    progress.add(1);
    if (first == kNoDoc || p.first != key) {
      key = p.first, first = p.second;
      continue;
    }
    if (job.is_reference(doc_source(p.second))) continue;  // both are references (first is smaller)
    if (verifier.keep(first, p.second)) edges.add(first, p.second);
  }
  WorkWriter out(job.edges_path(unit), WorkKind::kEdges, sizeof(Pair), unit, params);
  edges.finish(out);
  out.commit();
}
}  // namespace

uint64_t bucket_params(const Job& job, uint32_t unit) {
  double threshold = job.options().threshold;
  uint64_t bits = 0;
  std::memcpy(&bits, &threshold, sizeof bits);
  Xxh64 h;
  for (uint64_t v : {uint64_t{unit}, uint64_t{job.options().verify}, bits}) h.update(&v, sizeof v);
  for (size_t s = 0; s < job.num_sources(); ++s) {
    const WorkHeader sig = job.current(job.sig_path(s), WorkKind::kSignatures, job.sig_record_bytes(), "signatures",
                                       job.sig_params(s));
    const WorkHeader band = job.current(job.band_path(s, unit), WorkKind::kBandKeys, sizeof(Pair), "signatures",
                                        job.sig_params(s));
    const uint64_t v[3] = {band.params_xxh64, band.records_xxh64, sig.records_xxh64};
    h.update(v, sizeof v);
  }
  return h.digest();
}

void run_buckets(const Job& job, StageTask task) {
  Signatures sigs;
  for (size_t s = 0; s < job.num_sources(); ++s) sigs.files.push_back(open_signatures(job, s));
  const std::vector<uint32_t> all = job.units();
  std::vector<uint32_t> mine;  // a contiguous range of bands per task
  for (size_t k = all.size() * task.task / task.tasks; k < all.size() * (task.task + 1) / task.tasks; ++k)
    mine.push_back(all[k]);
  const uint32_t threads = std::max<uint32_t>(1, job.options().threads);
  parallel_for(threads, mine.size(), [&](size_t k) {
    const uint32_t unit = mine[k];
    const uint64_t params = bucket_params(job, unit);
    if (work_file_done(job.edges_path(unit), WorkKind::kEdges, sizeof(Pair), params)) {
      log::info("buckets of band ", unit, ": done already, kept");
      return;
    }
    bucket_unit(job, unit, sigs, params, job.options().memory_bytes / threads);
  });
}

}  // namespace loom::dedup
