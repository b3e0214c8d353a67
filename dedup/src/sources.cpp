#include "loom/dedup/sources.h"

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/sys.h"

namespace loom::dedup {

namespace {
uint64_t mix(std::initializer_list<uint64_t> values) {
  Xxh64 h;
  for (uint64_t v : values) h.update(&v, sizeof v);
  return h.digest();
}
}  // namespace

const char* source_format_name(SourceFormat f) {
  switch (f) {
    case SourceFormat::kLoom: return "loom";
    case SourceFormat::kInternlm: return "internlm";
    case SourceFormat::kMegatron: return "megatron";
  }
  return "unknown";
}

Source::Source(const std::string& bin_path) : path_(bin_path) {
  const ShardKind kind = detect_shard_kind(bin_path);
  LOOM_CHECK(kind != ShardKind::kPacked, bin_path,
             ": is a packed shard (loom-pack pack's output), expected token shards of documents");
  if (kind == ShardKind::kInternlm) {
    format_ = SourceFormat::kInternlm;
    internlm_ = std::make_unique<InternlmReader>(bin_path);
    identity_ = mix({1, xxh64_file(meta_path_for(bin_path)), sys::file_size(bin_path)});
  } else if (kind == ShardKind::kMegatron) {
    format_ = SourceFormat::kMegatron;
    megatron_ = std::make_unique<MegatronReader>(bin_path);
    identity_ = mix({2, xxh64_file(megatron_idx_path(bin_path)), sys::file_size(bin_path)});
  } else {
    format_ = SourceFormat::kLoom;
    loom_ = std::make_unique<ShardReader>(bin_path);  // kUnknown: the reader says what is wrong
    identity_ = mix({3, loom_->header().bin_xxh64, loom_->header().offsets_xxh64, loom_->num_tokens()});
  }
}

uint64_t Source::num_docs() const {
  return loom_ ? loom_->num_docs() : internlm_ ? internlm_->num_docs() : megatron_->num_docs();
}
uint64_t Source::num_tokens() const {
  return loom_ ? loom_->num_tokens() : internlm_ ? internlm_->num_tokens() : megatron_->num_tokens();
}
uint64_t Source::doc_len(uint64_t i) const {
  return loom_ ? loom_->doc_len(i) : internlm_ ? internlm_->doc_len(i) : megatron_->doc_len(i);
}

void Source::read_doc(uint64_t i, std::vector<uint32_t>& out) const {
  out.clear();
  if (loom_) loom_->read_doc(i, out);
  else if (internlm_) internlm_->read_doc(i, out);
  else megatron_->read_doc(i, out);
}

std::optional<TokenizerInfo> Source::tokenizer() const {
  if (loom_) return loom_->tokenizer();
  return std::nullopt;
}

void Source::verify(uint32_t vocab_size) const {
  if (loom_) loom_->verify_deep([](uint64_t) {}, vocab_size);
  else if (internlm_) internlm_->verify_deep(vocab_size);
  else megatron_->verify_deep(vocab_size);
}

std::vector<std::string> Source::files() const { return SourceWriter::files_for(format_, path_); }

std::vector<std::string> SourceWriter::files_for(SourceFormat f, const std::string& bin_path) {
  if (f == SourceFormat::kMegatron) return {bin_path, megatron_idx_path(bin_path)};
  return {bin_path, meta_path_for(bin_path)};
}

SourceWriter::SourceWriter(const Source& like, const std::string& bin_path) {
  if (like.loom()) {
    const ShardHeader& h = like.loom()->header();
    loom_ = std::make_unique<ShardWriter>(bin_path, like.loom()->tokenizer(), h.encoder);
  } else if (like.megatron()) {
    const uint8_t code = like.megatron()->dtype_code();
    megatron_ = std::make_unique<MegatronWriter>(bin_path, code, code == kMegatronUint16 ? 65536 : uint64_t{1} << 31);
  } else {
    internlm_ = std::make_unique<InternlmWriter>(bin_path);
  }
}

void SourceWriter::add_doc(const std::vector<uint32_t>& ids) {
  if (loom_) {
    loom_->add_doc(ids);
  } else if (megatron_) {
    megatron_->add_doc(ids);
  } else {
    LOOM_CHECK(internlm_->fits(), "an InternLM shard holds at most 2^31-1 bytes; this output would be larger");
    internlm_->add_doc(ids);
  }
}

uint64_t SourceWriter::num_docs() const {
  return loom_ ? loom_->num_docs() : internlm_ ? internlm_->num_docs() : megatron_->num_docs();
}

void SourceWriter::commit() {
  if (loom_) loom_->commit();
  else if (internlm_) internlm_->commit();
  else megatron_->commit();
}

}  // namespace loom::dedup
