// The shards loom-dedup reads and writes, in any of the formats loom reads: loom token shards,
// InternLM shards and Megatron-LM datasets (common/'s readers), told apart by content. An output
// is written in its input's format, its documents a subsequence of the input's, in order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/internlm_format.h"
#include "loom/megatron_format.h"
#include "loom/shard_format.h"

namespace loom::dedup {

enum class SourceFormat { kLoom, kInternlm, kMegatron };
const char* source_format_name(SourceFormat f);

class Source {
 public:
  explicit Source(const std::string& bin_path);
  const std::string& path() const { return path_; }
  SourceFormat format() const { return format_; }
  uint64_t num_docs() const;
  uint64_t num_tokens() const;
  uint64_t doc_len(uint64_t i) const;
  // Document i's ids into out (replacing what it held).
  void read_doc(uint64_t i, std::vector<uint32_t>& out) const;
  // The tokenizer its header records (loom shards only; the other formats record none).
  std::optional<TokenizerInfo> tokenizer() const;
  // Every id and checksum the format has, one pass (ids < vocab_size when vocab_size > 0).
  void verify(uint32_t vocab_size) const;
  // What identifies the content without reading it all: the loom header's checksums, or the
  // index file's XXH64 and the .bin's size for the formats without checksums.
  uint64_t identity() const { return identity_; }
  const ShardReader* loom() const { return loom_.get(); }
  const MegatronReader* megatron() const { return megatron_.get(); }
  // Every file of the shard (what an output must not replace).
  std::vector<std::string> files() const;

 private:
  std::string path_;
  SourceFormat format_;
  std::unique_ptr<ShardReader> loom_;
  std::unique_ptr<InternlmReader> internlm_;
  std::unique_ptr<MegatronReader> megatron_;
  uint64_t identity_ = 0;
};

// Writes a source's kept documents in its format under temporary names; commit() renames.
class SourceWriter {
 public:
  SourceWriter(const Source& like, const std::string& bin_path);
  void add_doc(const std::vector<uint32_t>& ids);
  uint64_t num_docs() const;
  void commit();
  // The files commit() writes for an output at bin_path of this format.
  static std::vector<std::string> files_for(SourceFormat f, const std::string& bin_path);

 private:
  std::unique_ptr<ShardWriter> loom_;
  std::unique_ptr<InternlmWriter> internlm_;
  std::unique_ptr<MegatronWriter> megatron_;
};

}  // namespace loom::dedup
