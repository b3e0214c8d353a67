// A SentencePiece .model loaded by libsentencepiece: what a shard header records of it (vocab size,
// bos/eos ids, fingerprint = XXH64 of the .model file), encoding text and decoding ids. The one
// loader of loom-tokenize and loom-pack. encode() and decode() are const and thread-safe
// (SentencePieceProcessor's are, after Load), so threads share one model.
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

namespace loom {

class SentencePieceModel {
 public:
  // Throws loom::Error when the file is missing or is not a SentencePiece model.
  explicit SentencePieceModel(const std::string& model_path);
  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  const std::string& path() const { return path_; }
  uint32_t vocab_size() const { return vocab_size_; }
  int32_t bos_id() const { return bos_id_; }  // -1: the model has none
  int32_t eos_id() const { return eos_id_; }
  uint64_t fingerprint() const { return fingerprint_; }
  // What a shard header records when documents carry bos and/or eos (both false: flags 0, as for a
  // model given only to name the tokenizer); throws when a flag asks for an id the model lacks.
  TokenizerInfo info(bool bos, bool eos) const;

  // Appends the ids of text (no bos/eos) to out.
  void encode(std::string_view text, std::vector<uint32_t>& out) const;
  // Throws when an id is outside the vocabulary (a shard of another model).
  std::string decode(const std::vector<uint32_t>& ids) const;

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  uint32_t vocab_size_ = 0;
  int32_t bos_id_ = -1, eos_id_ = -1;
  uint64_t fingerprint_ = 0;
};

}  // namespace loom
