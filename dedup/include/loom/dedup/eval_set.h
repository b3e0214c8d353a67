// Decontamination's side of loom-dedup: evaluation texts tokenized with the training data's
// SentencePiece model (no bos/eos), and the set of their n-grams (shingles of n tokens, hashed as
// in minhash.h). A training document that shares one of these n-grams is contaminated.
//
// Items: in NAME.jsonl each non-empty line is one item, its text the string at `key`; NAME.json
// holds one array of such objects; in NAME.txt each non-empty line is one item. An item is named
// "FILE:N", N its 1-based line (jsonl, txt) or array position (json). Items shorter than n tokens
// have no n-gram and match nothing (counted in short_items()).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/shard_format.h"

namespace loom::dedup {

struct EvalOptions {
  std::vector<std::string> files;
  std::string key = "text";
  std::string model;
  uint32_t ngram = 13;
};

struct EvalText {
  std::string name;
  std::string text;
};
// The items of one evaluation file, as above; errors name the file and line.
std::vector<EvalText> read_eval_items(const std::string& path, const std::string& key);

// XXH64 of what decides the matches: the files' bytes, key, n and the model file's XXH64 (its
// fingerprint), computed without tokenizing anything.
uint64_t eval_fingerprint(const EvalOptions& options);

class EvalSet {
 public:
  explicit EvalSet(const EvalOptions& options);
  size_t num_items() const { return names_.size(); }
  size_t short_items() const { return short_items_; }
  size_t num_ngrams() const { return ngrams_.size(); }
  const std::string& item_name(uint64_t item) const { return names_.at(item); }
  // eval_fingerprint() of its options.
  uint64_t fingerprint() const { return fingerprint_; }
  // The model's vocab size, bos/eos ids and fingerprint (flags 0), for check_same_tokenizer.
  const TokenizerInfo& tokenizer() const { return tokenizer_; }
  uint32_t ngram() const { return ngram_; }
  // The first position j of ids whose n-gram is an item's (the smallest item index having it), or
  // false. scratch: reused shingles.
  bool first_match(const uint32_t* ids, size_t n, uint64_t& position, uint64_t& item,
                   std::vector<uint64_t>& scratch) const;

 private:
  uint32_t ngram_;
  std::vector<std::string> names_;
  std::unordered_map<uint64_t, uint32_t> ngrams_;  // n-gram hash -> smallest item index
  size_t short_items_ = 0;
  uint64_t fingerprint_ = 0;
  TokenizerInfo tokenizer_;
};

}  // namespace loom::dedup
