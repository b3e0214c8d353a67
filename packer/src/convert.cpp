#include "loom/packer/convert.h"

#include <algorithm>
#include <optional>

#include "documents.h"
#include "loom/error.h"
#include "loom/internlm_format.h"
#include "loom/megatron_format.h"
#include "loom/log.h"
#include "loom/packer/inputs.h"
#include "loom/progress.h"
#include "loom/shard_format.h"
#include "loom/spm/sentencepiece_model.h"
#include "loom/sys.h"

namespace loom::packer {

namespace {
void to_internlm(const std::string& in, const std::string& out, ConvertReport& rep) {
  ShardReader r(in);
  InternlmWriter w(out);
  Progress progress(str("convert ", sys::basename(in)), r.num_docs(), "docs");
  for_each_doc_checked(r, [&](uint64_t i, const std::vector<uint32_t>& ids) {
    LOOM_CHECK(w.fits(), in, ": document ", i, " would start past byte 2^31-1 of ", out,
               ", InternLM's int32 offsets cannot address it; split the input first (loom-pack split)");
    w.add_doc(ids);
    progress.add(1);
  });
  w.commit();
  rep.documents += w.num_docs();
  rep.tokens += w.num_tokens();
}

void to_megatron(const std::string& in, const std::string& out, ConvertReport& rep) {
  ShardReader r(in);
  const uint32_t vocab = r.header().vocab_size;
  MegatronWriter w(out, megatron_dtype_for_vocab(vocab), vocab);
  Progress progress(str("convert ", sys::basename(in)), r.num_docs(), "docs");
  for_each_doc_checked(r, [&](uint64_t, const std::vector<uint32_t>& ids) {
    w.add_doc(ids);
    progress.add(1);
  });
  w.commit();
  rep.documents += w.num_docs();
  rep.tokens += w.num_tokens();
}

// InternLM or Megatron (formats without a tokenizer record) -> loom.
template <typename Reader>
void to_loom(const Reader& r, const std::string& in, const std::string& out, const std::optional<TokenizerInfo>& given,
             uint32_t vocab_size, ConvertReport& rep) {
  uint32_t max_id = 0;
  {
    Progress check(str("convert: verify ", sys::basename(in)), sys::file_size(in));
    max_id = r.verify_deep(given ? given->vocab_size : vocab_size, [&](uint64_t n) { check.add(n); });
  }
  TokenizerInfo info;
  if (given) {
    info = *given;
  } else {
    info.vocab_size = vocab_size ? vocab_size : max_id + 1;
    if (!vocab_size)
      log::warn(in, ": no --model or --vocab-size; using vocab size ", info.vocab_size, " (largest id + 1), no bos/eos");
  }
  // Flags from the data: set when every non-empty document carries bos/eos (a model cannot say).
  bool all_bos = info.bos_id >= 0, all_eos = info.eos_id >= 0, any = false;
  std::vector<uint32_t> ids;
  for (uint64_t i = 0; i < r.num_docs() && (all_bos || all_eos); ++i) {
    ids.clear();
    r.read_doc(i, ids);
    if (ids.empty()) continue;
    any = true;
    all_bos = all_bos && ids.front() == static_cast<uint32_t>(info.bos_id);
    all_eos = all_eos && ids.back() == static_cast<uint32_t>(info.eos_id);
  }
  info.flags = (any && all_bos ? kShardFlagBos : 0) | (any && all_eos ? kShardFlagEos : 0);
  ShardWriter w(out, info);
  Progress progress(str("convert ", sys::basename(in)), r.num_docs(), "docs");
  copy_docs(r, w, progress);
  w.commit();
  rep.documents += w.num_docs();
  rep.tokens += w.num_tokens();
}
}  // namespace

ConvertReport convert_shards(const std::vector<std::string>& input_paths, const ConvertOptions& o) {
  const std::vector<std::string> names = unique_basenames(input_paths);
  std::vector<std::string> inputs = shard_files(input_paths), outputs;
  if (!o.model.empty()) inputs.push_back(o.model);
  for (const std::string& name : names) {
    const std::string out = o.output_dir + "/" + name;
    outputs.insert(outputs.end(), {out, o.to == ConvertTarget::kMegatron ? megatron_idx_path(out) : meta_path_for(out)});
  }
  sys::check_outputs_spare_inputs(inputs, outputs);
  std::optional<TokenizerInfo> given;
  if (!o.model.empty()) given = SentencePieceModel(o.model).info(false, false);
  sys::make_dirs(o.output_dir);
  ConvertReport rep;
  for (size_t i = 0; i < input_paths.size(); ++i) {
    const std::string& in = input_paths[i];
    const std::string out = o.output_dir + "/" + names[i];
    const ShardKind kind = detect_shard_kind(in);
    if (o.to == ConvertTarget::kLoom) {
      LOOM_CHECK(kind == ShardKind::kInternlm || kind == ShardKind::kMegatron, in, ": is a ", shard_kind_name(kind),
                 " shard; --to loom converts InternLM shards and Megatron-LM datasets");
      if (kind == ShardKind::kInternlm) to_loom(InternlmReader(in), in, out, given, o.vocab_size, rep);
      else to_loom(MegatronReader(in), in, out, given, o.vocab_size, rep);
    } else {
      LOOM_CHECK(kind == ShardKind::kLoom || kind == ShardKind::kUnknown, in, ": is a ", shard_kind_name(kind),
                 " shard; --to ", o.to == ConvertTarget::kInternlm ? "internlm" : "megatron", " converts loom token shards");
      if (o.to == ConvertTarget::kInternlm) to_internlm(in, out, rep);
      else to_megatron(in, out, rep);
    }
    ++rep.files;
  }
  return rep;
}

InternlmAsLoom::InternlmAsLoom(const std::vector<std::string>& input_paths, const std::string& scratch_parent,
                               ConvertOptions options)
    : paths_(input_paths) {
  std::vector<std::string> internlm;  // and Megatron datasets: formats without a tokenizer record
  uint64_t megatron = 0;
  for (const std::string& p : input_paths) {
    const ShardKind kind = detect_shard_kind(p);
    if (kind == ShardKind::kInternlm || kind == ShardKind::kMegatron) internlm.push_back(p);
    megatron += kind == ShardKind::kMegatron;
  }
  if (internlm.empty()) return;
  sys::make_dirs(scratch_parent);
  scratch_ = sys::make_unique_dir(scratch_parent, ".loom-pack-scratch.");
  options.to = ConvertTarget::kLoom;
  options.output_dir = scratch_;
  const std::vector<std::string> names = unique_basenames(internlm);
  for (const std::string& n : names) written_.push_back(scratch_ + "/" + n);
  try {
    convert_shards(internlm, options);
  } catch (...) {
    remove_scratch();
    throw;
  }
  size_t k = 0;
  for (std::string& p : paths_)
    if (k < internlm.size() && p == internlm[k]) p = written_[k++], ++converted_;
  const uint64_t internlm_shards = converted_ - megatron;
  log::info(internlm_shards ? str(internlm_shards, " InternLM shard(s)") : std::string(),
            internlm_shards && megatron ? " and " : "", megatron ? str(megatron, " Megatron-LM dataset(s)") : std::string(),
            " read through their loom conversion in ", scratch_);
}

// Only the names this object wrote (a conversion that failed half-way removed its own
// temporaries), then the folder, which rmdir leaves if anything else is in it.
void InternlmAsLoom::remove_scratch() const {
  if (scratch_.empty()) return;
  for (const std::string& bin : written_) {
    sys::remove_file(meta_path_for(bin));
    sys::remove_file(bin);
  }
  sys::remove_dir(scratch_);
}

InternlmAsLoom::~InternlmAsLoom() {
  try {
    remove_scratch();
  } catch (const std::exception& e) {
    log::warn("could not remove ", scratch_, ": ", e.what());
  }
}

}  // namespace loom::packer
