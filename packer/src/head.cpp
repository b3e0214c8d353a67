#include "loom/packer/head.h"

#include <algorithm>
#include <vector>

#include "documents.h"
#include "loom/hash.h"
#include "loom/internlm_format.h"
#include "loom/megatron_format.h"
#include "loom/log.h"
#include "loom/packed_format.h"
#include "loom/shard_format.h"
#include "loom/spm/sentencepiece_model.h"

namespace loom::packer {

namespace {
void check_fingerprint(const std::string& path, uint64_t shard_fp, const SentencePieceModel& model) {
  if (shard_fp != 0 && shard_fp != model.fingerprint())
    log::warn(path, ": made with tokenizer ", hex64(shard_fp), ", decoding with a model of fingerprint ",
              hex64(model.fingerprint()), "; the text may be wrong");
}
}  // namespace

void print_head(const std::string& bin_path, const SentencePieceModel& model, uint64_t n, std::ostream& out) {
  const ShardKind kind = detect_shard_kind(bin_path);
  if (kind == ShardKind::kPacked) {
    PackedReader r(bin_path);
    check_fingerprint(bin_path, r.header().model_fingerprint, model);
    std::vector<uint32_t> pack, ids;
    for (uint64_t p = 0; p < std::min(n, r.num_packs()); ++p) {
      r.read_pack(p, pack);
      for (const PackedSegment* g = r.segments_begin(p); g != r.segments_end(p); ++g) {
        ids.assign(pack.begin() + g->start, pack.begin() + g->start + g->length);
        out << "== pack " << p << " segment " << (g - r.segments_begin(p)) << ": document " << g->doc << ", tokens ["
            << g->doc_pos << ", " << uint64_t{g->doc_pos} + g->length << ")"
            << (g->seg_flags & kSegEndsDoc ? ", ends document" : "") << " ==\n"
            << model.decode(ids) << "\n";
      }
    }
    return;
  }
  auto print_doc = [&](uint64_t i, const std::vector<uint32_t>& doc) {
    out << "== document " << i << " (" << doc.size() << " tokens) ==\n" << model.decode(doc) << "\n";
  };
  if (kind == ShardKind::kInternlm) {
    for_each_doc(InternlmReader(bin_path), print_doc, n);
    return;
  }
  if (kind == ShardKind::kMegatron) {
    // Megatron's SentencePieceTokenizer adds ids after the model's pieces; the model cannot decode them.
    for_each_doc(MegatronReader(bin_path), [&](uint64_t i, const std::vector<uint32_t>& doc) {
      out << "== document " << i << " (" << doc.size() << " tokens) ==\n";
      std::vector<uint32_t> run;
      for (size_t k = 0; k <= doc.size(); ++k) {
        if (k < doc.size() && doc[k] < model.vocab_size()) {
          run.push_back(doc[k]);
          continue;
        }
        out << model.decode(run);
        run.clear();
        if (k < doc.size()) out << "[id " << doc[k] << "]";
      }
      out << "\n";
    }, n);
    return;
  }
  ShardReader r(bin_path);
  check_fingerprint(bin_path, r.header().model_fingerprint, model);
  for_each_doc(r, print_doc, n);
}

}  // namespace loom::packer
