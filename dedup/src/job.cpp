#include "job.h"

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "loom/cli.h"
#include "loom/error.h"
#include "loom/hash.h"
#include "loom/log.h"
#include "loom/sys.h"

namespace loom::dedup {

uint64_t mix_hash(std::initializer_list<uint64_t> values) {
  Xxh64 h;
  for (uint64_t v : values) h.update(&v, sizeof v);
  return h.digest();
}

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::kExact: return "exact";
    case Reason::kNear: return "near";
    case Reason::kContaminated:
    case Reason::kContaminatedReported: return "contaminated";
  }
  return "unknown";
}

Job::Job(const DedupOptions& o) : o_(o) {
  LOOM_CHECK(!o_.inputs.empty(), "no input shards");
  const size_t n = o_.references.size() + o_.inputs.size();
  LOOM_CHECK(n < (size_t{1} << (64 - kDocIndexBits)), n, " sources, at most ", size_t{1} << (64 - kDocIndexBits));
  std::vector<std::string> paths = o_.references;
  paths.insert(paths.end(), o_.inputs.begin(), o_.inputs.end());
  const Source* first_loom = nullptr;
  for (const std::string& p : paths) {
    sources_.push_back(std::make_unique<Source>(p));
    const Source& s = *sources_.back();
    LOOM_CHECK(s.num_docs() < (uint64_t{1} << kDocIndexBits), p, ": ", s.num_docs(), " documents, at most 2^40");
    num_docs_.push_back(s.num_docs());
    if (!s.loom()) continue;
    if (!first_loom) first_loom = &s;
    else check_same_tokenizer(*first_loom->tokenizer(), first_loom->path(), *s.tokenizer(), s.path());
  }
  for (size_t s = 0; s < o_.references.size(); ++s)
    for (size_t t = o_.references.size(); t < n; ++t)
      LOOM_CHECK(!sys::same_file(paths[s], paths[t]), paths[t], ": is also given as a reference set");
  const std::string text = str("loom-dedup 1 ngram=", o_.minhash.ngram, " bands=", o_.minhash.bands, " rows=",
                               o_.minhash.rows, " seed=", o_.minhash.seed, " near=", o_.near);
  settings_ = xxh64(text.data(), text.size());
  std::set<std::string> seen;
  for (const std::string& p : o_.inputs) {
    LOOM_CHECK(seen.insert(sys::basename(p)).second, p, ": another input is also named ", sys::basename(p),
               "; outputs are named after inputs, so input names must differ");
  }
  std::vector<std::string> outputs;
  for (size_t s = o_.references.size(); s < n; ++s)
    for (const std::string& f : SourceWriter::files_for(source(s).format(), output_path(s))) outputs.push_back(f);
  std::vector<std::string> inputs;
  for (const auto& s : sources_)
    for (const std::string& f : s->files()) inputs.push_back(f);
  sys::check_outputs_spare_inputs(inputs, outputs);
}

std::vector<uint32_t> Job::units() const {
  std::vector<uint32_t> u;
  if (o_.near)
    for (uint32_t b = 0; b < o_.minhash.bands; ++b) u.push_back(b);
  u.push_back(exact_unit());
  return u;
}

namespace {
std::string source_stem(const std::string& work, size_t s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%05zu", s);
  return work + "/sources/" + buf;
}
}  // namespace

std::string Job::sig_path(size_t s) const { return source_stem(o_.work_dir, s) + ".sig"; }
std::string Job::band_path(size_t s, uint32_t unit) const {
  return source_stem(o_.work_dir, s) + (unit == exact_unit() ? std::string(".band-exact") : str(".band-", unit));
}
std::string Job::contam_path(size_t s) const { return source_stem(o_.work_dir, s) + ".contam"; }
std::string Job::edges_path(uint32_t unit) const {
  return o_.work_dir + "/edges/" + (unit == exact_unit() ? std::string("band-exact") : str("band-", unit)) + ".edges";
}
std::string Job::apply_stamp_path(size_t s) const { return source_stem(o_.work_dir, s) + ".applied"; }
std::string Job::output_path(size_t s) const { return o_.output_dir + "/" + sys::basename(source(s).path()); }

uint64_t Job::sig_params(size_t s) const { return mix_hash({settings_, s, is_reference(s), source(s).identity()}); }
uint64_t Job::contam_params(size_t s, uint64_t eval_fingerprint) const {
  return mix_hash({eval_fingerprint, s, source(s).identity()});
}

WorkHeader Job::finished(const std::string& path, WorkKind kind, uint32_t record_bytes, const char* stage) const {
  LOOM_CHECK(sys::exists(path), path, ": missing; run the ", stage, " stage first (--stage ", stage, ")");
  return WorkReader(path, kind, record_bytes).header();
}

WorkHeader Job::current(const std::string& path, WorkKind kind, uint32_t record_bytes, const char* stage,
                        uint64_t params) const {
  const WorkHeader h = finished(path, kind, record_bytes, stage);
  LOOM_CHECK(h.params_xxh64 == params, path, ": made from other inputs or settings than this run's; run the ", stage,
             " stage again with them (--stage ", stage, ")");
  return h;
}

namespace {
std::string doc_text(uint64_t doc) {
  std::ostringstream hex;
  hex << std::hex << doc;
  return str("document 0x", hex.str(), " (source ", doc_source(doc), ", index ", doc_index(doc), ")");
}

// Refuses record i of file: its `doc` is not a document of the job's sources.
[[noreturn]] void refuse_doc(const Job& job, const WorkReader& file, uint64_t i, uint64_t doc) {
  const uint64_t s = doc_source(doc);
  LOOM_CHECK(s < job.num_sources(), file.path(), ": record ", i, ": ", doc_text(doc), ", expected a source < ",
             job.num_sources());
  const uint64_t docs = job.source(s).num_docs();
  LOOM_FAIL(file.path(), ": record ", i, ": ", doc_text(doc), ", expected an index < ", docs, " (the documents of ",
            job.source(s).path(), ")");
}

inline void check_doc(const Job& job, const WorkReader& file, uint64_t i, uint64_t doc) {
  if (__builtin_expect(!job.has_doc(doc), 0)) refuse_doc(job, file, i, doc);
}

void check_doc_of(const Job& job, const WorkReader& file, uint64_t i, uint64_t doc, size_t s) {
  check_doc(job, file, i, doc);
  LOOM_CHECK(doc_source(doc) == s, file.path(), ": record ", i, ": ", doc_text(doc), ", expected a document of source ",
             s, " (", job.source(s).path(), ")");
}

void check_increasing(const WorkReader& file, uint64_t i, uint64_t doc, uint64_t previous) {
  LOOM_CHECK(doc > previous, file.path(), ": record ", i, ": ", doc_text(doc), " after ",
             doc_text(previous), ", expected documents in strictly increasing order");
}

void check_item(const WorkReader& file, uint64_t i, uint64_t item, uint64_t num_items) {
  LOOM_CHECK(item < num_items, file.path(), ": record ", i, ": eval item ", item, ", expected an item < ", num_items,
             " (the items of the --eval files)");
}
}  // namespace

std::unique_ptr<WorkReader> open_signatures(const Job& job, size_t s) {
  job.current(job.sig_path(s), WorkKind::kSignatures, job.sig_record_bytes(), "signatures", job.sig_params(s));
  auto file = std::make_unique<WorkReader>(job.sig_path(s), WorkKind::kSignatures, job.sig_record_bytes());
  LOOM_CHECK(file->num_records() == job.source(s).num_docs(), file->path(), ": ", file->num_records(),
             " records, expected ", job.source(s).num_docs(), " (one per document of ", job.source(s).path(), ")");
  return file;
}

void verify_band_keys(const Job& job, const WorkReader& file, size_t s) {
  file.verify([&](uint64_t i, const uint64_t* r) {
    check_doc_of(job, file, i, r[1], s);
    if (i == 0) return;
    const uint64_t* p = r - 2;
    LOOM_CHECK(r[0] > p[0] || (r[0] == p[0] && r[1] > p[1]), file.path(), ": record ", i, ": key 0x", hex64(r[0]),
               " of ", doc_text(r[1]), " after key 0x", hex64(p[0]), " of ", doc_text(p[1]),
               ", expected sorted by key, then document");
  });
}

void verify_edges(const Job& job, const WorkReader& file) {
  file.verify([&](uint64_t i, const uint64_t* r) {
    check_doc(job, file, i, r[0]);
    check_doc(job, file, i, r[1]);
    LOOM_CHECK(r[0] < r[1], file.path(), ": record ", i, ": edge (", doc_text(r[0]), ", ", doc_text(r[1]),
               "), expected a < b");
  });
}

void verify_contamination(const Job& job, const WorkReader& file, size_t s, uint64_t num_items) {
  file.verify([&](uint64_t i, const uint64_t* r) {
    check_doc_of(job, file, i, r[0], s);
    if (i > 0) check_increasing(file, i, r[0], r[-3]);
    check_item(file, i, r[1], num_items);
  });
}

void verify_removals(const Job& job, const WorkReader& file, uint64_t num_items) {
  file.verify([&](uint64_t i, const uint64_t* r) {
    const Removal* m = reinterpret_cast<const Removal*>(r);
    check_doc(job, file, i, m->doc);
    LOOM_CHECK(!job.is_reference(doc_source(m->doc)), file.path(), ": record ", i, ": ", doc_text(m->doc),
               " of the reference set ", job.source(doc_source(m->doc)).path(), ", expected an input's document");
    LOOM_CHECK(m->reason >= 1 && m->reason <= 4, file.path(), ": record ", i, ": reason ", m->reason,
               ", expected a reason of 1 to 4 (exact, near, contaminated, contaminated and reported)");
    // A document only reported as contaminated may also be a duplicate: that record comes next.
    const bool reported_then_duplicate = i > 0 && m[-1].doc == m->doc &&
                                         m[-1].reason == uint64_t(Reason::kContaminatedReported) &&
                                         m->reason <= uint64_t(Reason::kNear);
    if (i > 0 && !reported_then_duplicate) check_increasing(file, i, m->doc, m[-1].doc);
    if (m->reason <= uint64_t(Reason::kNear)) {
      check_doc(job, file, i, m->matched);
    } else {
      LOOM_CHECK(m->matched == kNoDoc, file.path(), ": record ", i, ": a contaminated document matched with ",
                 doc_text(m->matched), ", expected none (2^64-1)");
      if (num_items != kNoDoc) check_item(file, i, m->item, num_items);
    }
    const uint64_t len = job.source(doc_source(m->doc)).doc_len(doc_index(m->doc));
    LOOM_CHECK(m->length == len, file.path(), ": record ", i, ": ", doc_text(m->doc), " of ", m->length,
               " tokens, expected its length, ", len);
  });
}

void parallel_for(uint32_t threads, size_t n, const std::function<void(size_t)>& f) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        f(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next = n;
      }
    }
  };
  std::vector<std::thread> pool;
  for (uint32_t t = 1; t < threads && t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

void run_stage(const DedupOptions& options, Stage stage, StageTask task) {
  LOOM_ASSERT(task.tasks > 0 && task.task < task.tasks, "task ", task.task, " of ", task.tasks);
  const Job job(options);
  sys::make_dirs(options.work_dir + "/sources");
  sys::make_dirs(options.work_dir + "/edges");
  if (stage == Stage::kAll || stage == Stage::kSignatures) run_signatures(job, task);
  if (stage == Stage::kAll || stage == Stage::kBuckets) run_buckets(job, task);
  if (stage == Stage::kAll || stage == Stage::kClusters) {
    run_clusters(job);
    write_report(job);
  }
  if (stage == Stage::kAll || stage == Stage::kApply) {
    sys::make_dirs(options.output_dir);
    run_apply(job, task);
  }
}

}  // namespace loom::dedup
