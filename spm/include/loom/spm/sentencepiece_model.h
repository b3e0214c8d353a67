// A SentencePiece .model loaded by libsentencepiece: what a shard header records of it (vocab size,
// bos/eos ids, fingerprint = XXH64 of the .model file), encoding text and decoding ids. The one
// loader of loom-tokenize and loom-pack. encode() and decode() are const and thread-safe
// (SentencePieceProcessor's are, after Load; loom's encoder keeps its scratch per thread), so
// threads share one model.
// Encoding goes through libsentencepiece or through loom's own exact encoder (loom/spm_encoder.h,
// several times faster, the same ids): kAuto takes loom's wherever it encodes the model (unigram and
// BPE; not word or char models), else libsentencepiece.
// Where loom's encoder serves, libsentencepiece is loaded only when first needed (decode(), or a
// model with self-test samples, which it checks at load): the header fields are read as it reads
// them, and loom's encoder refuses every vocabulary it would refuse. InternLM's 103k model loads in
// about a third of the time of both (one process of a one-line input: 0.07 s before).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "loom/shard_format.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace loom {

namespace spm {
class SpmEncoder;
}

enum class EncoderChoice { kAuto, kLoom, kSentencePiece };

// alignas(64): read by every encoder thread for every document (see SpmEncoder).
class alignas(64) SentencePieceModel {
 public:
  // Throws loom::Error when the file is missing or is not a SentencePiece model, or with kLoom when
  // loom's encoder cannot encode it.
  explicit SentencePieceModel(const std::string& model_path, EncoderChoice encoder = EncoderChoice::kSentencePiece);
  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  const std::string& path() const { return path_; }
  uint32_t vocab_size() const { return vocab_size_; }
  int32_t bos_id() const { return bos_id_; }  // -1: the model has none
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const;  // -1: the model has none
  // The piece of an id < vocab_size(), and the id of a piece (-1 when no id has it).
  std::string id_to_piece(uint32_t id) const;
  int32_t piece_to_id(const std::string& piece) const;
  uint64_t fingerprint() const { return fingerprint_; }
  // What a shard header records when documents carry bos and/or eos (both false: flags 0, as for a
  // model given only to name the tokenizer); throws when a flag asks for an id the model lacks.
  TokenizerInfo info(bool bos, bool eos) const;
  // Which encoder encode() uses: kShardEncoderLoom or kShardEncoderSentencePiece, and its name.
  uint32_t encoder() const;
  const char* encoder_name() const;
  // Why kAuto chose libsentencepiece ("" when it chose loom's encoder or was not asked).
  const std::string& why_not_loom() const { return why_not_loom_; }

  // Appends the ids of text (no bos/eos) to out.
  void encode(std::string_view text, std::vector<uint32_t>& out) const;
  // Appends the ids of text that continues a document cut just before it (a piece after the first
  // under --max-doc-bytes), as they read inside the whole document: without the dummy-prefix
  // "\u2581" SentencePiece puts at the start of a text, which would decode as a space that is not
  // there. A piece starting with whitespace that the model drops (remove_extra_whitespaces) keeps
  // the prefix, which then stands for that whitespace, as in the whole document.
  void encode_continuation(std::string_view text, std::vector<uint32_t>& out) const;
  // Throws when an id is outside the vocabulary (a shard of another model).
  std::string decode(const std::vector<uint32_t>& ids) const;
  // Whether libsentencepiece's processor is loaded (always when it encodes; else once needed).
  bool sentencepiece_loaded() const;

 private:
  std::string path_;
  // libsentencepiece's processor: loaded by the constructor when it encodes, else by the first
  // decode() (sp_once_).
  mutable std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  mutable std::once_flag sp_once_;
  mutable std::atomic<bool> sp_loaded_{false};  // sp_ is set: what sentencepiece_loaded() reads, from any thread
  std::unique_ptr<spm::SpmEncoder> loom_;  // set: encode() uses it (with or without the dummy prefix)
  // The same model without the dummy prefix, for encode_continuation() when loom's encoder is not used.
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_no_prefix_;
  const sentencepiece::SentencePieceProcessor& processor() const;
  void load_processor() const;
  void encode_with(const sentencepiece::SentencePieceProcessor* sp, bool dummy_prefix, std::string_view text,
                   std::vector<uint32_t>& out) const;
  std::string why_not_loom_;
  uint32_t vocab_size_ = 0;
  int32_t bos_id_ = -1, eos_id_ = -1;
  uint64_t fingerprint_ = 0;
};

}  // namespace loom
