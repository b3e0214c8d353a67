#include "loom/packer/head.h"

#include <algorithm>
#include <vector>

#include "loom/hash.h"
#include "loom/internlm_format.h"
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
  std::vector<uint32_t> ids;
  const ShardKind kind = detect_shard_kind(bin_path);
  if (kind == ShardKind::kPacked) {
    PackedReader r(bin_path);
    check_fingerprint(bin_path, r.header().model_fingerprint, model);
    std::vector<uint32_t> pack;
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
  auto print_doc = [&](uint64_t i) {
    out << "== document " << i << " (" << ids.size() << " tokens) ==\n" << model.decode(ids) << "\n";
  };
  if (kind == ShardKind::kInternlm) {
    InternlmReader r(bin_path);
    for (uint64_t i = 0; i < std::min(n, r.num_docs()); ++i) {
      ids.clear();
      r.read_doc(i, ids);
      print_doc(i);
    }
    return;
  }
  ShardReader r(bin_path);
  check_fingerprint(bin_path, r.header().model_fingerprint, model);
  for (uint64_t i = 0; i < std::min(n, r.num_docs()); ++i) {
    ids.clear();
    r.read_doc(i, ids);
    print_doc(i);
  }
}

}  // namespace loom::packer
