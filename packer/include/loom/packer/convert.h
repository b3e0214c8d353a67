// `loom-pack convert`: loom <-> InternLM shards, lossless. Each input NAME.bin becomes
// DIR/NAME.bin in the other format.
//
// InternLM shards record no tokenizer, so InternLM -> loom takes vocab size, bos/eos and the
// fingerprint from --model (or only the vocab size from --vocab-size; without either, the largest
// id + 1 and no bos/eos). The header's bos/eos flags are set when every non-empty document starts
// with bos_id (ends with eos_id). With the model the shard was made with, loom -> InternLM -> loom
// gives back the same .bin and .meta, byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::packer {

enum class ConvertTarget { kLoom, kInternlm };

struct ConvertOptions {
  ConvertTarget to = ConvertTarget::kLoom;
  std::string output_dir;
  std::string model;         // InternLM -> loom: the SentencePiece model
  uint32_t vocab_size = 0;   // InternLM -> loom without a model
};

struct ConvertReport {
  uint64_t files = 0, documents = 0, tokens = 0;
};

ConvertReport convert_shards(const std::vector<std::string>& input_paths, const ConvertOptions& options);

}  // namespace loom::packer
