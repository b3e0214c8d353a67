// A loaded SentencePiece model. encode() is const and thread-safe (SentencePieceProcessor::Encode
// is, after Load), so all encoder threads share one Encoder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/shard_format.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace loom::tokenize {

class Encoder {
 public:
  explicit Encoder(const std::string& model_path);
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  // Appends the ids of text (no bos/eos) to out.
  void encode(std::string_view text, std::vector<uint32_t>& out) const;
  uint32_t vocab_size() const { return vocab_size_; }
  int32_t bos_id() const { return bos_id_; }  // -1: the model has none
  int32_t eos_id() const { return eos_id_; }
  uint64_t fingerprint() const { return fingerprint_; }
  const std::string& path() const { return path_; }
  // What the shard header records; throws when bos/eos is asked for and the model lacks it.
  TokenizerInfo info(bool bos, bool eos) const;

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  uint32_t vocab_size_ = 0;
  int32_t bos_id_ = -1, eos_id_ = -1;
  uint64_t fingerprint_ = 0;
};

}  // namespace loom::tokenize
