// `loom-tokenize train-spm`: trains a SentencePiece model (libsentencepiece_train) from the same
// documents loom-tokenize would encode, fed through a SentenceIterator (no temporary text file).
// The model is written atomically to PREFIX.model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/tokenize/document_reader.h"
#include "loom/tokenize/pipeline.h"

namespace loom::tokenize {

struct TrainSpmOptions {
  std::vector<std::string> inputs;
  ReaderOptions reader;
  OnError on_error = OnError::kFail;
  std::string model_prefix;
  uint32_t vocab_size = 0;
  std::string model_type = "unigram";   // unigram | bpe | char | word
  double character_coverage = 0.9995;
  std::string normalization = "nmt_nfkc";  // SentencePiece's normalization_rule_name
  bool byte_fallback = true;
  uint32_t max_sentence_length = 1 << 16;  // bytes; longer documents are cut on whitespace
  uint64_t input_sentence_size = 0;        // 0: every document
  unsigned threads = 1;
};

struct TrainSpmSummary {
  uint64_t docs = 0, bytes = 0, bad = 0;
  std::string model_path;
};

TrainSpmSummary run_train_spm(const TrainSpmOptions& options);

}  // namespace loom::tokenize
