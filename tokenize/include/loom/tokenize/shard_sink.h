// Where a tokenized input goes: a loom shard (loom::ShardWriter) or an InternLM one
// (loom::InternlmWriter), behind one interface. Both write under temporary names; commit() renames.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/shard_format.h"

namespace loom::tokenize {

enum class ShardFormat { kLoom, kInternlm };
const char* shard_format_name(ShardFormat f);

class ShardSink {
 public:
  virtual ~ShardSink() = default;
  virtual void add_doc(const uint32_t* ids, size_t n) = 0;
  virtual uint64_t num_docs() const = 0;
  virtual void commit() = 0;
};

// encoder: the kShardEncoder* value a loom shard's header records (InternLM's format has no place for it).
std::unique_ptr<ShardSink> make_shard_sink(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info,
                                           uint32_t encoder = kShardEncoderUnrecorded);
// Whether bin_path already holds a complete shard of this format written with this tokenizer
// setup (for --resume). A loom shard must match the model fingerprint and bos/eos flags.
bool shard_complete(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info, std::string& why_not);

}  // namespace loom::tokenize
