// The signatures stage: per source, one pass over its documents in blocks; each block's
// signatures (and eval matches) are computed on all threads, then written in document order.
#include <algorithm>
#include <optional>

#include "job.h"
#include "loom/dedup/external_sort.h"
#include "loom/log.h"
#include "loom/progress.h"

namespace loom::dedup {

namespace {
constexpr size_t kBlockDocs = 4096;

struct BlockResult {
  std::vector<uint64_t> sigs;  // per document: length, exact_h0, exact_h1, sig[H]
  std::vector<Contamination> contam;  // at most one per document, index order after sorting
};

void compute_block(const Job& job, size_t s, const MinHasher& hasher, const EvalSet* eval, uint64_t begin,
                   uint64_t end, BlockResult& out) {
  const uint32_t rec = 3 + hasher.params().num_hashes();
  out.sigs.resize((end - begin) * rec);  // not zeroed: every value of every record is written below
  out.contam.clear();
  const size_t per = 64, chunks = (end - begin + per - 1) / per;
  std::vector<std::vector<Contamination>> found(chunks);
  parallel_for(job.options().threads, chunks, [&](size_t chunk) {
    std::vector<uint32_t> ids;
    std::vector<uint64_t> scratch;
    for (uint64_t i = begin + chunk * per; i < std::min(end, begin + (chunk + 1) * per); ++i) {
      job.source(s).read_doc(i, ids);
      uint64_t* r = out.sigs.data() + (i - begin) * rec;
      const ExactKey k = exact_key(ids.data(), ids.size());
      r[0] = k.length, r[1] = k.h0, r[2] = k.h1;
      hasher.signature(ids.data(), ids.size(), r + 3, scratch);
      uint64_t position = 0, item = 0;
      if (eval && eval->first_match(ids.data(), ids.size(), position, item, scratch))
        found[chunk].push_back(Contamination{make_doc(s, i), item, position});
    }
  });
  for (const auto& f : found) out.contam.insert(out.contam.end(), f.begin(), f.end());
}

bool source_done(const Job& job, size_t s, const EvalSet* eval) {
  const uint64_t params = job.sig_params(s);
  if (!work_file_done(job.sig_path(s), WorkKind::kSignatures, job.sig_record_bytes(), params)) return false;
  for (uint32_t u : job.units())
    if (!work_file_done(job.band_path(s, u), WorkKind::kBandKeys, sizeof(Pair), params)) return false;
  if (eval && !job.is_reference(s) && !work_file_done(job.contam_path(s), WorkKind::kContamination, sizeof(Contamination),
                              job.contam_params(s, eval->fingerprint())))
    return false;
  return true;
}

void check_tokenizer(const Job& job, size_t s, const EvalSet* eval) {
  if (!eval || !job.source(s).tokenizer()) return;
  TokenizerInfo model = eval->tokenizer();
  const TokenizerInfo shard = *job.source(s).tokenizer();
  model.flags = shard.flags;  // the model does not say whether documents carry bos/eos
  check_same_tokenizer(model, job.options().eval.model, shard, job.source(s).path());
}

void signatures_of(const Job& job, size_t s, const MinHasher& hasher, const EvalSet* eval) {
  const Source& src = job.source(s);
  check_tokenizer(job, s, eval);
  const uint32_t vocab = src.tokenizer() ? src.tokenizer()->vocab_size : eval ? eval->tokenizer().vocab_size : 0;
  src.verify(vocab);
  const uint64_t params = job.sig_params(s);
  const std::vector<uint32_t> units = job.units();
  WorkWriter sig(job.sig_path(s), WorkKind::kSignatures, job.sig_record_bytes(), hasher.params().num_hashes(), params);
  std::vector<std::unique_ptr<PairSorter>> sorters;
  for (uint32_t u : units)
    sorters.push_back(std::make_unique<PairSorter>(job.band_path(s, u), job.options().memory_bytes / units.size(), false));
  std::optional<WorkWriter> contam;
  if (eval && !job.is_reference(s))
    contam.emplace(job.contam_path(s), WorkKind::kContamination, sizeof(Contamination), 0,
                   job.contam_params(s, eval->fingerprint()));
  Progress progress(str("signatures ", src.path()), src.num_docs(), "docs");
  BlockResult block;
  const uint32_t rec = 3 + hasher.params().num_hashes();
  for (uint64_t begin = 0; begin < src.num_docs(); begin += kBlockDocs) {
    const uint64_t end = std::min<uint64_t>(src.num_docs(), begin + kBlockDocs);
    compute_block(job, s, hasher, contam ? eval : nullptr, begin, end, block);
    sig.add_many(block.sigs.data(), end - begin);
    for (uint64_t i = begin; i < end; ++i) {
      const uint64_t* r = block.sigs.data() + (i - begin) * rec;
      for (size_t k = 0; k < units.size(); ++k) {
        if (units[k] == job.exact_unit()) sorters[k]->add(r[1], make_doc(s, i));
        else if (r[0] > 0) sorters[k]->add(hasher.band_key(r + 3, units[k]), make_doc(s, i));
      }
    }
    if (contam) contam->add_many(block.contam.data(), block.contam.size());
    progress.add(end - begin);
  }
  for (size_t k = 0; k < units.size(); ++k) {
    WorkWriter band(job.band_path(s, units[k]), WorkKind::kBandKeys, sizeof(Pair), units[k], params);
    sorters[k]->finish(band);
    band.commit();
  }
  if (contam) contam->commit();
  sig.commit();  // last: the signatures file marks the source done
}
}  // namespace

void run_signatures(const Job& job, StageTask task) {
  const MinHasher hasher(job.options().minhash);
  std::optional<EvalSet> eval;
  if (job.decontaminating()) {
    eval.emplace(job.options().eval);
    log::info("evaluation set: ", eval->num_items(), " items, ", eval->num_ngrams(), " distinct ", eval->ngram(),
              "-grams; ", eval->short_items(), " items shorter than ", eval->ngram(), " tokens match nothing");
  }
  for (size_t s = task.task; s < job.num_sources(); s += task.tasks) {
    if (source_done(job, s, eval ? &*eval : nullptr)) {
      log::info("signatures of ", job.source(s).path(), ": done already, kept");
      continue;
    }
    signatures_of(job, s, hasher, eval ? &*eval : nullptr);
  }
}

}  // namespace loom::dedup
