// The report (one JSON line per removed or reported document, in input order) and the summary
// (documents and tokens in and out, per input and per reason), rendered from the removal records.
#include <cmath>
#include <optional>

#include "job.h"
#include "loom/json_text.h"
#include "loom/log.h"
#include "loom/progress.h"

namespace loom::dedup {

namespace {
struct Counts {
  uint64_t docs_in = 0, tokens_in = 0;
  uint64_t docs[5] = {}, tokens[5] = {};  // by Reason
  uint64_t removed_docs() const { return docs[1] + docs[2] + docs[3]; }
  uint64_t removed_tokens() const { return tokens[1] + tokens[2] + tokens[3]; }
  void add(const Counts& o) {
    docs_in += o.docs_in, tokens_in += o.tokens_in;
    for (int r = 0; r < 5; ++r) docs[r] += o.docs[r], tokens[r] += o.tokens[r];
  }
};

std::string report_line(const Job& job, const Removal& r, const EvalSet* eval) {
  const Source& src = job.source(doc_source(r.doc));
  const Reason reason = static_cast<Reason>(r.reason);
  std::string line = str("{\"input\":", json_quote(src.path()), ",\"index\":", doc_index(r.doc), ",\"tokens\":", r.length,
                         ",\"reason\":\"", reason_name(reason), "\",\"removed\":",
                         reason == Reason::kContaminatedReported ? "false" : "true");
  if (reason == Reason::kExact || reason == Reason::kNear) {
    line += str(",\"matched_input\":", json_quote(job.source(doc_source(r.matched)).path()),
                ",\"matched_index\":", doc_index(r.matched),
                ",\"matched_is_reference\":", job.is_reference(doc_source(r.matched)) ? "true" : "false",
                ",\"jaccard_estimate\":", json_number(r.estimate));
    if (!std::isnan(r.jaccard)) line += str(",\"jaccard\":", json_number(r.jaccard));
  } else {
    line += str(",\"eval_item\":", json_quote(eval ? eval->item_name(r.item) : str(r.item)),
                ",\"position\":", r.position);
  }
  return line + "}\n";
}

std::string counts_json(const std::string& head, const Counts& c) {
  std::string s = str("{", head, "\"documents_in\":", c.docs_in, ",\"tokens_in\":", c.tokens_in,
                      ",\"documents_out\":", c.docs_in - c.removed_docs(), ",\"tokens_out\":",
                      c.tokens_in - c.removed_tokens(), ",\"removed\":{");
  for (Reason r : {Reason::kExact, Reason::kNear, Reason::kContaminated}) {
    const int k = static_cast<int>(r);
    s += str(k > 1 ? "," : "", "\"", reason_name(r), "\":{\"documents\":", c.docs[k], ",\"tokens\":", c.tokens[k], "}");
  }
  const int rep = static_cast<int>(Reason::kContaminatedReported);
  return s + str("},\"contaminated_reported\":{\"documents\":", c.docs[rep], ",\"tokens\":", c.tokens[rep], "}}");
}
}  // namespace

void write_report(const Job& job) {
  const WorkReader removals(job.removals_path(), WorkKind::kRemovals, sizeof(Removal));
  std::optional<EvalSet> eval;
  if (job.decontaminating()) eval.emplace(job.options().eval);
  verify_removals(job, removals, eval ? eval->num_items() : 0);
  std::vector<Counts> counts(job.num_sources());
  for (size_t s = 0; s < job.num_sources(); ++s)
    counts[s].docs_in = job.source(s).num_docs(), counts[s].tokens_in = job.source(s).num_tokens();
  sys::AtomicFile report(job.report_path());
  for (uint64_t i = 0; i < removals.num_records(); ++i) {
    Removal r;
    std::memcpy(&r, removals.record(i), sizeof r);
    report.write(report_line(job, r, eval ? &*eval : nullptr));
    counts[doc_source(r.doc)].docs[r.reason] += 1;
    counts[doc_source(r.doc)].tokens[r.reason] += r.length;
  }
  std::string summary = "{\"inputs\":[";
  Counts total;
  for (size_t s = job.options().references.size(); s < job.num_sources(); ++s) {
    const Counts& c = counts[s];
    total.add(c);
    summary += str(s > job.options().references.size() ? "," : "", "\n  ",
                   counts_json(str("\"input\":", json_quote(job.source(s).path()), ","), c));
    log::info(job.source(s).path(), ": ", format_count(c.docs_in), " documents in, ",
              format_count(c.docs_in - c.removed_docs()), " out; removed ", format_count(c.docs[1]), " exact, ",
              format_count(c.docs[2]), " near, ", format_count(c.docs[3]), " contaminated (",
              format_percent(double(c.removed_tokens()), double(c.tokens_in)), " of tokens)");
  }
  summary += str("\n],\n\"total\":", counts_json("", total), "}\n");
  sys::AtomicFile out(job.summary_path());
  out.write(summary);
  report.commit();
  out.commit();
  log::info("total: ", format_count(total.docs_in), " documents in, ", format_count(total.docs_in - total.removed_docs()),
            " out (", format_percent(double(total.removed_docs()), double(total.docs_in)), " removed); report ",
            job.report_path(), ", summary ", job.summary_path());
}

}  // namespace loom::dedup
