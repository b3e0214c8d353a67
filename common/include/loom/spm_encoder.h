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
// Speed, exact by construction: pieces live in a flat open-addressing hash; BPE works on reused
// per-thread buffers; and for a BPE model without unused pieces, the text is cut between two
// characters that no piece holds side by side (the pairs with a non-ASCII character are read from
// the vocabulary at load; in spaced text the cuts fall before "\u2581", InternLM's after tab,
// newline or "\u2581"; in Chinese and Japanese between most words): no merge and no user-defined
// piece can cross such a cut, so each chunk's ids depend on the chunk alone and are cached per
// thread (chunk -> ids), backed by one table the threads share: a chunk that one thread encoded
// is copied, not encoded again, by the others (each thread's cache starts cold). UNIGRAM gets no
// cache: its path scores accumulate in float over the whole text, so a chunk's ids may depend on
// what precedes it.
// Not read because sentencepiece 0.1.97 encodes without them: the trainer's pretokenization
// (split_by_whitespace, split_by_unicode_script, split_by_number, split_digits) shapes only which
// pieces exist; the denormalizer and unk_surface only decoding.
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

// alignas(64): encoder threads read its fields for every text; no other object may share (and
// write) their cache lines. The same for its tables below and for SentencePieceModel.
class alignas(64) SpmEncoder {
 public:
  // Throws loom::Error for a model type it does not encode (WORD, CHAR), a malformed charsmap, or a
  // vocabulary libsentencepiece refuses to load (an empty or repeated piece, no or two unknown
  // pieces, byte pieces without byte_fallback or not all 256 with it), so that no model is encoded
  // here that libsentencepiece would not load.
  explicit SpmEncoder(SpmModel model);
  ~SpmEncoder();
  SpmEncoder(const SpmEncoder&) = delete;
  SpmEncoder& operator=(const SpmEncoder&) = delete;

  // The ids of SentencePiece's EncodeAsIds (no bos/eos).
  std::vector<int64_t> encode(std::string_view text) const;
  // The same ids appended to out. Thread-safe: scratch and cache are per thread. dummy_prefix false:
  // as the model with add_dummy_prefix off (one encoder serves both, sharing its tables and cache).
  void encode(std::string_view text, std::vector<uint32_t>& out, bool dummy_prefix = true) const;
  // The normalized text the model segments ("\u2581" for spaces).
  std::string normalize(std::string_view text) const;
  const SpmModel& model() const { return m_; }
  // SentencePiece's PieceToId: control, unknown and byte pieces first, unk_id when absent.
  int piece_to_id(std::string_view piece) const;
  // Whether chunk ids are cached (see above), and why not when they are not.
  bool chunk_cache() const { return chunk_cache_; }
  const std::string& why_no_chunk_cache() const { return why_no_cache_; }

 private:
  struct Trie;
  struct PieceTable;
  struct PairSet;
  struct Scratch;
  struct SharedChunks;
  // The constructor's parts. index_pieces fills the piece tables, tries, pairs and scores and checks
  // the pieces as sentencepiece does; it returns false when a piece ends inside a UTF-8 character.
  bool index_pieces();
  // Adds a piece's adjacent character pairs (a non-ASCII one among them) and the spaced-text cut
  // tables; false when the piece ends inside a character (nothing more is added then).
  bool add_pairs(std::string_view piece);
  void load_charsmap();  // the normalizer's precompiled charsmap, when the model has one
  // Length of the user-defined piece at the start of s (longest), 0 if none.
  size_t user_defined_prefix(std::string_view s) const;
  // (replacement, bytes consumed) for the start of s; s non-empty.
  std::pair<std::string_view, size_t> normalize_prefix(std::string_view s) const;
  void normalize_into(std::string_view text, std::string& out, bool dummy_prefix = true) const;
  // Appends the ids of a normalized text; prev_unk carries "the last id was <unk>" across calls
  // (a run of unknown pieces is one <unk> without byte fallback).
  void encode_unigram(std::string_view normalized, Scratch& scratch, std::vector<uint32_t>& out,
                      bool& prev_unk) const;
  void encode_bpe(std::string_view normalized, Scratch& scratch, std::vector<uint32_t>& out, bool& prev_unk) const;
  void encode_bpe_cached(std::string_view normalized, Scratch& scratch, std::vector<uint32_t>& out) const;
  // Appends the id of a final piece (its byte pieces when it is unknown and byte_fallback is on).
  void emit(int id, std::string_view text, std::vector<uint32_t>& out, bool& prev_unk) const;
  // Whether some piece may hold the characters at left and at right (right_len bytes) of s side
  // by side (when they are both ASCII, not asked).
  bool may_join(std::string_view s, size_t left, size_t right, size_t right_len) const;
  // Where the chunk that starts at s[at] ends: the first boundary no piece spans, or s.size().
  size_t chunk_end(std::string_view s, size_t at) const;

  SpmModel m_;
  std::unique_ptr<PieceTable> pieces_;                  // normal, user-defined and unused pieces
  std::unique_ptr<PieceTable> reserved_;                // control, unknown and byte pieces
  std::unique_ptr<Trie> vocab_trie_;                    // pieces_, for UNIGRAM's lattice
  std::unique_ptr<Trie> user_trie_;                     // user-defined pieces
  bool user_first_[256] = {};                           // bytes a user-defined piece starts with
  int byte_ids_[256] = {};                              // <0xNN> pieces (unk_id where missing)
  std::vector<uint32_t> charsmap_units_;                // Darts double array; empty: no rules
  std::string charsmap_pool_;
  float min_score_ = 0, max_score_ = 0;                 // over normal pieces
  std::unique_ptr<PairSet> pairs_;                      // adjacent characters in pieces, a non-ASCII one among them
  // ASCII c such that no piece holds (c, U+2581), (U+2581, c): exact, from the pieces.
  bool cut_before_space_[128] = {}, cut_after_space_[128] = {};
  bool has_unused_ = false;
  bool chunk_cache_ = false;
  std::string why_no_cache_;
  std::unique_ptr<SharedChunks> shared_;                // chunk_cache_: every thread's encoded chunks
  uint64_t instance_ = 0;                               // tells the per-thread caches of encoders apart
};

}  // namespace loom::spm
