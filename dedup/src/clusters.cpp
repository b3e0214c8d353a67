// The clusters stage: every document of a band's pair labelled with the smallest document of its
// connected component (components.h: external sorts, memory bounded by --memory-mb whatever the
// number of documents), then, cluster by cluster, the kept member and each removed member's match,
// sorted by document and merged with the contaminated documents (streamed from the sources'
// contamination files) into removal records sorted by document (work_file.h, kind 5).
//
// The kept document of a cluster is its smallest document id: a reference document when the
// cluster has one (references come first), else the first in input order. Contaminated documents
// being removed are never kept: the smallest member that is not takes their place. With
// --keep none no input document of a cluster of two or more is kept.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "job.h"
#include "loom/dedup/components.h"
#include "loom/dedup/external_sort.h"
#include "loom/log.h"

namespace loom::dedup {

namespace {
// Marks, in a (cluster, document) pair, a document removed as contaminated: document ids leave the
// top bit free for fewer than 2^23 sources (checked by run_clusters).
constexpr uint64_t kRemovedBit = uint64_t{1} << 63;

struct Inputs {
  std::vector<std::unique_ptr<WorkReader>> edges, sigs, contam;  // contam: the inputs' own, in order
};

// The number of items of the eval files (EvalSet's item indices), without tokenizing them.
uint64_t eval_items(const EvalOptions& eval) {
  uint64_t n = 0;
  for (const std::string& f : eval.files) n += read_eval_items(f, eval.key).size();
  return n;
}

uint64_t clusters_params(const Job& job, const Inputs& in) {
  Xxh64 h;
  double threshold = job.options().threshold;
  const uint64_t head[4] = {uint64_t(job.options().keep), job.options().remove_contaminated, job.options().verify, 0};
  h.update(head, sizeof head);
  h.update(&threshold, sizeof threshold);
  for (const auto* list : {&in.edges, &in.sigs, &in.contam})
    for (const auto& f : *list) {
      const uint64_t v[2] = {f->header().params_xxh64, f->header().records_xxh64};
      h.update(v, sizeof v);
    }
  return h.digest();
}

Inputs open_inputs(const Job& job) {
  Inputs in;
  const uint64_t eval = job.decontaminating() ? eval_fingerprint(job.options().eval) : 0;
  for (uint32_t u : job.units()) {
    job.current(job.edges_path(u), WorkKind::kEdges, sizeof(Pair), "buckets", bucket_params(job, u));
    in.edges.push_back(std::make_unique<WorkReader>(job.edges_path(u), WorkKind::kEdges, sizeof(Pair)));
  }
  for (size_t s = 0; s < job.num_sources(); ++s) {
    in.sigs.push_back(open_signatures(job, s));
    if (!job.decontaminating() || job.is_reference(s)) continue;
    job.current(job.contam_path(s), WorkKind::kContamination, sizeof(Contamination), "signatures",
                job.contam_params(s, eval));
    in.contam.push_back(std::make_unique<WorkReader>(job.contam_path(s), WorkKind::kContamination, sizeof(Contamination)));
  }
  return in;
}

// The records of the contamination files, checked once the stage has work to do (the apply stage
// opens the inputs only for the headers that make removals_params).
void verify_contaminations(const Job& job, const Inputs& in) {
  if (in.contam.empty()) return;
  const uint64_t items = eval_items(job.options().eval);
  size_t f = 0;
  for (size_t s = 0; s < job.num_sources(); ++s)
    if (!job.is_reference(s)) verify_contamination(job, *in.contam[f++], s, items);
}

// The contaminated documents of every input in document order: each file is sorted by document,
// and the files are in source order.
class ContaminatedDocs {
 public:
  explicit ContaminatedDocs(const Inputs& in) : files_(in.contam) { skip_empty(); }
  bool done() const { return file_ == files_.size(); }
  Contamination head() const {
    const uint64_t* r = files_[file_]->record(i_);
    return Contamination{r[0], r[1], r[2]};
  }
  void next() { ++i_, skip_empty(); }
  // Whether doc is contaminated; asked in increasing order of doc.
  bool contains(uint64_t doc) {
    while (!done() && head().doc < doc) next();
    return !done() && head().doc == doc;
  }

 private:
  void skip_empty() {
    while (file_ < files_.size() && i_ == files_[file_]->num_records()) ++file_, i_ = 0;
  }
  const std::vector<std::unique_ptr<WorkReader>>& files_;
  size_t file_ = 0;
  uint64_t i_ = 0;
};

class Decider {
 public:
  Decider(const Job& job, const Inputs& in) : job_(job), in_(in) {}
  Removal duplicate(uint64_t doc, uint64_t matched) {
    const uint64_t *a = in_.sigs[doc_source(doc)]->record(doc_index(doc));
    const uint64_t *b = in_.sigs[doc_source(matched)]->record(doc_index(matched));
    const bool exact = a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
    Removal r{doc, matched, uint64_t(exact ? Reason::kExact : Reason::kNear), 0, 0, a[0],
              estimated_jaccard(a + 3, b + 3, job_.options().minhash.num_hashes()),
              std::numeric_limits<double>::quiet_NaN()};
    if (exact) r.jaccard = 1.0;
    else if (job_.options().verify) r.jaccard = verified(doc, matched);
    return r;
  }
  Removal contamination(const Contamination& c, bool removed) const {
    return Removal{c.doc, kNoDoc, uint64_t(removed ? Reason::kContaminated : Reason::kContaminatedReported),
                   c.item, c.position, job_.source(doc_source(c.doc)).doc_len(doc_index(c.doc)),
                   std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  }

 private:
  double verified(uint64_t a, uint64_t b) {
    job_.source(doc_source(a)).read_doc(doc_index(a), ids_);
    shingles(ids_.data(), ids_.size(), job_.options().minhash.ngram, sa_);
    job_.source(doc_source(b)).read_doc(doc_index(b), ids_);
    shingles(ids_.data(), ids_.size(), job_.options().minhash.ngram, sb_);
    return exact_jaccard(sa_, sb_);
  }
  const Job& job_;
  const Inputs& in_;
  std::vector<uint32_t> ids_;
  std::vector<uint64_t> sa_, sb_;
};

// (cluster, document) for every document in a pair, the cluster named by its smallest document,
// sorted; kRemovedBit set on documents removed as contaminated.
PairRun cluster_members(const Job& job, const Inputs& in, const std::string& path, ComponentStats& stats) {
  std::vector<PairRun> edges;
  for (const auto& e : in.edges) {
    verify_edges(job, *e);
    edges.push_back(PairRun{e->path(), sizeof(WorkHeader), e->num_records()});
  }
  const bool remove = job.options().remove_contaminated;
  ContaminatedDocs contaminated(in);
  PairSorter members(path, job.options().memory_bytes, false);
  stats = label_components(edges, job.removals_path(), job.options().memory_bytes, [&](uint64_t doc, uint64_t root) {
    const bool out = remove && !job.is_reference(doc_source(doc)) && contaminated.contains(doc);
    members.add(root, doc | (out ? kRemovedBit : 0));
  });
  return write_sorted(members, path);
}

// Per cluster, its members in document order decide the kept one (none with --keep none and no
// reference); each removed duplicate gives (doc, matched), sorted by doc. Matched is the kept
// member, else the cluster's smallest other member.
PairRun duplicates(const Job& job, const PairRun& members, const std::string& path) {
  const bool keep_first = job.options().keep == Keep::kFirst;
  PairSorter removed(path, job.options().memory_bytes, false);
  for (PairStream m(members.path, members.offset, members.count); !m.done();) {
    const uint64_t root = m.head().first, first = m.head().second & ~kRemovedBit;
    const bool first_out = m.head().second & kRemovedBit;
    m.next();
    LOOM_ASSERT(!m.done() && m.head().first == root, "cluster ", root, " has one member");
    const uint64_t second = m.head().second & ~kRemovedBit;
    uint64_t kept = kNoDoc;
    if (keep_first ? !first_out : job.is_reference(doc_source(first))) kept = first;  // references come first
    auto visit = [&](uint64_t doc, bool out) {
      if (job.is_reference(doc_source(doc)) || doc == kept || out) return;
      removed.add(doc, kept != kNoDoc ? kept : doc == first ? second : first);
    };
    visit(first, first_out);
    for (; !m.done() && m.head().first == root; m.next()) {
      const uint64_t doc = m.head().second & ~kRemovedBit;
      const bool out = m.head().second & kRemovedBit;
      if (keep_first && kept == kNoDoc && !out) kept = doc;
      visit(doc, out);
    }
  }
  return write_sorted(removed, path);
}
}  // namespace

uint64_t removals_params(const Job& job) { return clusters_params(job, open_inputs(job)); }

void run_clusters(const Job& job) {
  const Inputs in = open_inputs(job);
  const uint64_t params = clusters_params(job, in);
  if (work_file_done(job.removals_path(), WorkKind::kRemovals, sizeof(Removal), params)) {
    log::info("clusters: done already, kept");
    return;
  }
  LOOM_CHECK(job.num_sources() <= (size_t{1} << 23), job.num_sources(),
             " sources: the clusters stage takes at most 2^23 (reference sets and inputs)");
  verify_contaminations(job, in);
  const std::string by_cluster = job.removals_path() + ".clusters", by_doc = job.removals_path() + ".duplicates";
  WorkWriter out(job.removals_path(), WorkKind::kRemovals, sizeof(Removal), 0, params);
  ComponentStats stats;
  {
    ScratchFiles remove_before_commit({by_cluster, by_doc});  // a rerun after the commit finds none
    const PairRun dups = duplicates(job, cluster_members(job, in, by_cluster, stats), by_doc);
    // Duplicates and contaminated documents are both in document order: merged as they are written.
    Decider decider(job, in);
    ContaminatedDocs contaminated(in);
    for (PairStream d(dups.path, dups.offset, dups.count);; d.next()) {
      const uint64_t doc = d.done() ? kNoDoc : d.head().first;
      for (; !contaminated.done() && contaminated.head().doc <= doc; contaminated.next()) {
        const Removal r = decider.contamination(contaminated.head(), job.options().remove_contaminated);
        out.add(&r);
      }
      if (d.done()) break;
      const Removal r = decider.duplicate(doc, d.head().second);
      out.add(&r);
    }
  }
  out.commit();
  log::info("clusters: ", stats.nodes, " documents in candidate pairs, ", out.num_records(), " removal records");
}

}  // namespace loom::dedup
