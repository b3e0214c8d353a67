// The apply stage: per input, its kept documents copied in order into the output folder, in its
// format. A stamp beside the work files records the removals it applied and the output's XXH64:
// an output whose stamp and bytes agree is not rewritten.
#include <algorithm>
#include <cstring>

#include "job.h"
#include "loom/hash.h"
#include "loom/log.h"
#include "loom/progress.h"

namespace loom::dedup {

namespace {
std::string stamp_text(uint64_t params, const std::string& output_hash) {
  return str("params ", hex64(params), "\noutput ", output_hash, "\n");
}

bool applied(const Job& job, size_t s, uint64_t params) {
  const std::string stamp = job.apply_stamp_path(s), out = job.output_path(s);
  if (!sys::exists(stamp)) return false;
  const bool have = sys::exists(out) && sys::exists(SourceWriter::files_for(job.source(s).format(), out)[1]);
  const std::string want = stamp_text(params, have ? hex64(xxh64_file(out)) : "none");
  return sys::read_file(stamp) == want;
}

// The documents of source s that are removed (reasons 1 to 3), sorted.
std::vector<uint64_t> removed_of(const WorkReader& removals, size_t s) {
  std::vector<uint64_t> out;
  uint64_t lo = 0, hi = removals.num_records();
  while (lo < hi) {  // the first record of source s
    const uint64_t mid = (lo + hi) / 2;
    if (doc_source(removals.record(mid)[0]) < s) lo = mid + 1;
    else hi = mid;
  }
  for (uint64_t i = lo; i < removals.num_records() && doc_source(removals.record(i)[0]) == s; ++i) {
    const uint64_t* r = removals.record(i);
    if (r[2] != uint64_t(Reason::kContaminatedReported) && (out.empty() || out.back() != doc_index(r[0])))
      out.push_back(doc_index(r[0]));
  }
  return out;
}

void apply_source(const Job& job, size_t s, const WorkReader& removals, uint64_t params) {
  const Source& src = job.source(s);
  const std::string out = job.output_path(s);
  const std::vector<uint64_t> removed = removed_of(removals, s);
  const std::vector<std::string> files = SourceWriter::files_for(src.format(), out);
  std::string output_hash = "none";
  if (removed.size() == src.num_docs()) {
    for (const std::string& f : files) sys::remove_file(f);  // every document removed: no output
    log::info(src.path(), ": every document removed, no output");
  } else {
    SourceWriter w(src, out);
    std::vector<uint32_t> ids;
    Progress progress(str("apply ", src.path()), src.num_docs(), "docs");
    for (uint64_t i = 0, k = 0; i < src.num_docs(); ++i) {
      if (k < removed.size() && removed[k] == i) {
        ++k;
      } else {
        src.read_doc(i, ids);
        w.add_doc(ids);
      }
      if ((i & 4095) == 4095) progress.add(4096);
    }
    w.commit();
    output_hash = hex64(xxh64_file(out));
  }
  sys::AtomicFile stamp(job.apply_stamp_path(s));
  stamp.write(stamp_text(params, output_hash));
  stamp.commit();
}
}  // namespace

void run_apply(const Job& job, StageTask task) {
  job.current(job.removals_path(), WorkKind::kRemovals, sizeof(Removal), "clusters", removals_params(job));
  const WorkReader removals(job.removals_path(), WorkKind::kRemovals, sizeof(Removal));
  verify_removals(job, removals, kNoDoc);  // the eval items are not read here
  std::vector<size_t> mine;
  for (size_t s = job.options().references.size() + task.task; s < job.num_sources(); s += task.tasks)
    mine.push_back(s);
  parallel_for(std::max<uint32_t>(1, job.options().threads), mine.size(), [&](size_t k) {
    const size_t s = mine[k];
    const uint64_t params = mix_hash({removals.header().records_xxh64, s, job.source(s).identity()});
    if (applied(job, s, params)) {
      log::info(job.source(s).path(), ": output ", job.output_path(s), " done already, kept");
      return;
    }
    apply_source(job, s, removals, params);
  });
}

}  // namespace loom::dedup
