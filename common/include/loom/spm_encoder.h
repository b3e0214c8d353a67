// SentencePiece encoding (text -> ids) inside loom-train, which cannot link libsentencepiece (see
// hf_tokenizer.h). It reproduces SentencePieceProcessor::EncodeAsIds of sentencepiece 0.1.9x for the
// UNIGRAM and BPE models, tested id for id against Python sentencepiece on whole corpora:
//   1. Normalizer: user-defined pieces are kept verbatim; otherwise the longest rule of the
//      precompiled charsmap (NFKC etc.) replaces the text, else one UTF-8 character is copied (a
//      malformed byte becomes U+FFFD). Then the whitespace rules: leading/trailing/repeated spaces
//      dropped (remove_extra_whitespaces), "\u2581" prefixed (add_dummy_prefix; suffixed with
//      treat_whitespace_as_suffix), ' ' written as "\u2581" (escape_whitespaces).
//   2. Model: UNIGRAM is a Viterbi over the pieces' scores, a character no piece covers costing
//      min(score of normal pieces) - 10 as <unk>; BPE merges adjacent symbols, highest score first
//      (leftmost on ties), user-defined pieces frozen as single symbols.
//   3. Unknown pieces become their UTF-8 bytes as <0xNN> pieces (byte_fallback), or runs of them
//      one <unk>.
// The precompiled charsmap blob: u32 (little endian) trie size in bytes, then that many bytes of a
// Darts-clone double array (u32 units), then the pool of NUL-terminated replacement strings that
// the trie's values index.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/spm_model.h"

namespace loom::spm {

class SpmEncoder {
 public:
  // Throws loom::Error for a model type it does not encode (WORD, CHAR) or a malformed charsmap.
  explicit SpmEncoder(SpmModel model);
  ~SpmEncoder();
  SpmEncoder(const SpmEncoder&) = delete;
  SpmEncoder& operator=(const SpmEncoder&) = delete;

  // The ids of SentencePiece's EncodeAsIds (no bos/eos).
  std::vector<int64_t> encode(std::string_view text) const;
  // The normalized text the model segments ("\u2581" for spaces).
  std::string normalize(std::string_view text) const;
  const SpmModel& model() const { return m_; }

 private:
  struct Trie;
  struct Piece {
    std::string_view text;
    int id;
  };
  // Length of the user-defined piece at the start of s (longest), 0 if none.
  size_t user_defined_prefix(std::string_view s) const;
  // (replacement, bytes consumed) for the start of s; s non-empty.
  std::pair<std::string_view, size_t> normalize_prefix(std::string_view s) const;
  std::vector<Piece> encode_unigram(std::string_view normalized) const;
  std::vector<Piece> encode_bpe(std::string_view normalized) const;
  int piece_to_id(std::string_view piece) const;

  SpmModel m_;
  std::unordered_map<std::string_view, int> pieces_;    // normal, user-defined and unused pieces
  std::unordered_map<std::string_view, int> reserved_;  // the other types (control, unknown, byte)
  std::unique_ptr<Trie> vocab_trie_;                    // pieces_, for UNIGRAM's lattice
  std::unique_ptr<Trie> user_trie_;                     // user-defined pieces
  std::vector<uint32_t> charsmap_units_;                // Darts double array; empty: no rules
  std::string charsmap_pool_;
  float min_score_ = 0, max_score_ = 0;                 // over normal pieces
};

}  // namespace loom::spm
