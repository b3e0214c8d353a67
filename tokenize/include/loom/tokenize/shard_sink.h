// Where a tokenized input goes: a loom shard (loom::ShardWriter), an InternLM one
// (loom::InternlmWriter) or a Megatron-LM indexed dataset (loom::MegatronWriter), behind one
// interface. All write under temporary names; commit() renames.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/shard_format.h"

namespace loom::tokenize {

enum class ShardFormat { kLoom, kInternlm, kMegatron };
const char* shard_format_name(ShardFormat f);
// The index file written beside a .bin: NAME.bin.meta, or NAME.idx for a Megatron dataset.
std::string index_path_for(ShardFormat f, const std::string& bin_path);

// Documents in a shard format's own bytes, made by ShardSink::serialize on any thread.
struct SerializedDocs {
  std::string bytes;            // the documents back to back, as the .bin stores them
  std::vector<uint64_t> tokens;   // per document: its ids
  std::vector<uint64_t> lengths;  // per document: its bytes
  void clear() { bytes.clear(), tokens.clear(), lengths.clear(); }
};

// alignas(64): the encoder threads read it (serialize) for every document while the writing
// thread writes to it; no other object may share those cache lines.
class alignas(64) ShardSink {
 public:
  virtual ~ShardSink() = default;
  virtual void add_doc(const uint32_t* ids, size_t n) = 0;
  // add_doc in two steps, so that the writing thread only copies bytes: serialize() (const, any
  // thread; throws for an id outside the vocabulary) appends a document's bytes to out, and
  // add_serialized() appends them to the shard, in order. The shard is the same as add_doc's.
  virtual void serialize(const uint32_t* ids, size_t n, SerializedDocs& out) const = 0;
  virtual void add_serialized(const SerializedDocs& docs) = 0;
  virtual uint64_t num_docs() const = 0;
  virtual void commit() = 0;
};

// encoder: the kShardEncoder* value a loom shard's header records. settings_xxh64: XXH64 of the
// settings that change the output (settings_text(), tokenize_job.h). A loom shard records both in
// its header; InternLM's and Megatron's formats have no place for them, so their sinks write the
// sidecar below. A Megatron sink takes info.vocab_size as the tokenizer type's vocab_size (the
// dtype and the id limit, loom/megatron_format.h).
std::unique_ptr<ShardSink> make_shard_sink(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info,
                                           uint32_t encoder = kShardEncoderUnrecorded, uint64_t settings_xxh64 = 0);

// The sidecar of an InternLM shard or a Megatron dataset, NAME.bin.loom-settings, written after
// the pair is in place:
//   loom-tokenize internlm record 1        (megatron: loom-tokenize megatron record 1)
//   settings_xxh64 <16 hex digits>
//   bin_xxh64 <16 hex digits>       of NAME.bin
//   meta_xxh64 <16 hex digits>      of NAME.bin.meta   (megatron: idx_xxh64, of NAME.idx)
// Without it (or with other values) --resume tokenizes the input again.
std::string settings_record_path(const std::string& bin_path);

// Whether bin_path already holds a complete shard of this format written with these settings (for
// --resume). A loom shard must match the model fingerprint, the bos/eos flags and settings_xxh64
// (0, not recorded, never matches) and pass verify_deep (ids and the .bin checksum). An InternLM
// shard or a Megatron dataset must open and match its sidecar record: settings and both files'
// checksums.
bool shard_complete(ShardFormat format, const std::string& bin_path, const TokenizerInfo& info, uint64_t settings_xxh64,
                    std::string& why_not);

}  // namespace loom::tokenize
