// The clusters stage: every band's pairs joined by union-find over the documents that have one
// (memory: 16 bytes per such document), then one decision per input document of a cluster or
// contaminated, written as removal records sorted by document (work_file.h, kind 5).
//
// The kept document of a cluster is its smallest document id: a reference document when the
// cluster has one (references come first), else the first in input order. Contaminated documents
// being removed are never kept: the smallest member that is not takes their place. With
// --keep none no input document of a cluster of two or more is kept.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "job.h"
#include "loom/dedup/external_sort.h"
#include "loom/log.h"

namespace loom::dedup {

namespace {
class UnionFind {
 public:
  explicit UnionFind(size_t n) : parent_(n) {
    for (size_t i = 0; i < n; ++i) parent_[i] = i;
  }
  uint64_t find(uint64_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  // The smaller root becomes the root: a cluster's root is its smallest member.
  void unite(uint64_t a, uint64_t b) {
    a = find(a), b = find(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);
  }

 private:
  std::vector<uint64_t> parent_;
};

struct Inputs {
  std::vector<std::unique_ptr<WorkReader>> edges, sigs, contam;
  std::vector<Contamination> contaminated;  // every input's, sorted by doc
};

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
    in.sigs.push_back(std::make_unique<WorkReader>(job.sig_path(s), WorkKind::kSignatures, job.sig_record_bytes()));
    if (!job.decontaminating() || job.is_reference(s)) continue;
    job.current(job.contam_path(s), WorkKind::kContamination, sizeof(Contamination), "signatures",
                job.contam_params(s, eval));
    in.contam.push_back(std::make_unique<WorkReader>(job.contam_path(s), WorkKind::kContamination, sizeof(Contamination)));
    const auto& f = *in.contam.back();
    f.verify();
    for (uint64_t i = 0; i < f.num_records(); ++i) {
      const uint64_t* r = f.record(i);
      in.contaminated.push_back(Contamination{r[0], r[1], r[2]});
    }
  }
  return in;
}

// Every document that has a pair, sorted, and the union-find over their positions in that list.
std::vector<uint64_t> cluster_nodes(const Inputs& in, std::optional<UnionFind>& uf) {
  std::vector<uint64_t> nodes;
  for (const auto& e : in.edges) {
    PairStream pairs(e->path(), sizeof(WorkHeader), e->num_records());
    for (; !pairs.done(); pairs.next()) nodes.push_back(pairs.head().first), nodes.push_back(pairs.head().second);
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  }
  uf.emplace(nodes.size());
  auto at = [&](uint64_t doc) { return std::lower_bound(nodes.begin(), nodes.end(), doc) - nodes.begin(); };
  for (const auto& e : in.edges) {
    e->verify();
    PairStream pairs(e->path(), sizeof(WorkHeader), e->num_records());
    for (; !pairs.done(); pairs.next()) uf->unite(at(pairs.head().first), at(pairs.head().second));
  }
  return nodes;
}

class Decider {
 public:
  Decider(const Job& job, const Inputs& in) : job_(job), in_(in) {}
  bool contaminated(uint64_t doc, Contamination& c) const {
    auto it = std::lower_bound(in_.contaminated.begin(), in_.contaminated.end(), doc,
                               [](const Contamination& a, uint64_t d) { return a.doc < d; });
    if (it == in_.contaminated.end() || it->doc != doc) return false;
    c = *it;
    return true;
  }
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

// Per cluster root: the kept member (kNoDoc: none) and the two smallest members.
struct ClusterHeads {
  std::vector<uint64_t> kept, first, second;
};

ClusterHeads cluster_heads(const Job& job, const std::vector<uint64_t>& nodes, UnionFind& uf, const Decider& d) {
  ClusterHeads h{std::vector<uint64_t>(nodes.size(), kNoDoc), std::vector<uint64_t>(nodes.size(), kNoDoc),
                 std::vector<uint64_t>(nodes.size(), kNoDoc)};
  const bool remove = job.options().remove_contaminated;
  Contamination c{};
  for (size_t i = 0; i < nodes.size(); ++i) {  // in document order: the first seen is the smallest
    const uint64_t root = uf.find(i), doc = nodes[i];
    if (h.first[root] == kNoDoc) h.first[root] = doc;
    else if (h.second[root] == kNoDoc) h.second[root] = doc;
    const bool out = remove && !job.is_reference(doc_source(doc)) && d.contaminated(doc, c);
    if (h.kept[root] == kNoDoc && !out && job.options().keep == Keep::kFirst) h.kept[root] = doc;
    if (job.options().keep == Keep::kNone && job.is_reference(doc_source(doc)) && h.kept[root] == kNoDoc)
      h.kept[root] = doc;  // references are kept under either rule
  }
  return h;
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
  std::optional<UnionFind> uf;
  const std::vector<uint64_t> nodes = cluster_nodes(in, uf);
  Decider decider(job, in);
  const ClusterHeads heads = cluster_heads(job, nodes, *uf, decider);
  WorkWriter out(job.removals_path(), WorkKind::kRemovals, sizeof(Removal), 0, params);
  // Nodes and contaminated documents are both in document order: merged as they are written.
  const bool remove = job.options().remove_contaminated;
  size_t c = 0;
  for (size_t i = 0; i <= nodes.size(); ++i) {
    const uint64_t doc = i < nodes.size() ? nodes[i] : kNoDoc;
    for (; c < in.contaminated.size() && in.contaminated[c].doc <= doc; ++c) {
      const Removal r = decider.contamination(in.contaminated[c], remove);
      out.add(&r);
    }
    if (i == nodes.size()) break;
    const uint64_t root = uf->find(i);
    if (job.is_reference(doc_source(doc)) || doc == heads.kept[root]) continue;
    Contamination found{};
    if (remove && decider.contaminated(doc, found)) continue;  // removed as contaminated, written above
    uint64_t matched = heads.kept[root];
    if (matched == kNoDoc) matched = doc == heads.first[root] ? heads.second[root] : heads.first[root];
    const Removal r = decider.duplicate(doc, matched);
    out.add(&r);
  }
  out.commit();
  log::info("clusters: ", nodes.size(), " documents in candidate pairs, ", out.num_records(), " removal records");
}

}  // namespace loom::dedup
