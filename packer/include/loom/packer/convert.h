// `loom-pack convert`: loom <-> InternLM shards and loom <-> Megatron-LM indexed datasets. Each
// input NAME.bin becomes DIR/NAME.bin in the other format (with NAME.bin.meta, or NAME.idx for
// Megatron). Loom inputs are checked as they are read (ids, flags, checksum) and nothing is
// renamed into place before the check passed.
//
// InternLM shards and Megatron datasets record no tokenizer, so -> loom takes vocab size, bos/eos and the
// fingerprint from --model (or only the vocab size from --vocab-size; without either, the largest
// id + 1 and no bos/eos). The header's bos/eos flags are set when every non-empty document starts
// with bos_id (ends with eos_id). With the model the shard was made with, loom -> InternLM -> loom
// gives back the same .bin and .meta, byte for byte. loom -> Megatron writes each document with ids
// as one sequence and an empty one as none, ids as Megatron's dtype for the header's vocab_size
// (uint16 below 65,500, else int32): what preprocess_data.py writes without --split-sentences, so
// such a dataset -> loom -> Megatron with the model (or --vocab-size) it was made with gives back
// the same .bin and .idx; without either the vocabulary is the largest id + 1, and the dtype may
// differ. A dataset of several sequences per document comes back with one: loom keeps documents,
// not sentences.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::packer {

enum class ConvertTarget { kLoom, kInternlm, kMegatron };

struct ConvertOptions {
  ConvertTarget to = ConvertTarget::kLoom;
  std::string output_dir;
  std::string model;         // InternLM/Megatron -> loom: the SentencePiece model
  uint32_t vocab_size = 0;   // InternLM/Megatron -> loom without a model
};

struct ConvertReport {
  uint64_t files = 0, documents = 0, tokens = 0;
};

ConvertReport convert_shards(const std::vector<std::string>& input_paths, const ConvertOptions& options);

// The inputs of a command that reads loom token shards (pack), with every InternLM shard and
// Megatron dataset among them
// replaced by its conversion (convert_shards with `options`, so exactly what `convert --to loom`
// writes) into a scratch folder of its own, made fresh inside `scratch_parent` (a unique name,
// sys::make_unique_dir) only when there is something to convert. At destruction it removes the
// files it wrote there and the folder, nothing else: a folder it did not make is never emptied.
// Loom shards pass through untouched, in their order.
class InternlmAsLoom {
 public:
  InternlmAsLoom(const std::vector<std::string>& input_paths, const std::string& scratch_parent, ConvertOptions options);
  ~InternlmAsLoom();
  InternlmAsLoom(const InternlmAsLoom&) = delete;
  InternlmAsLoom& operator=(const InternlmAsLoom&) = delete;
  const std::vector<std::string>& paths() const { return paths_; }
  uint64_t converted() const { return converted_; }

 private:
  void remove_scratch() const;
  std::string scratch_;               // "" until made
  std::vector<std::string> written_;  // the converted shards' .bin paths in scratch_
  std::vector<std::string> paths_;
  uint64_t converted_ = 0;
};

}  // namespace loom::packer
