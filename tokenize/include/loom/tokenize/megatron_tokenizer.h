// Megatron-LM's SentencePiece tokenizer types (--tokenizer-type of tools/preprocess_data.py), as
// megatron/training/tokenizer/tokenizer.py defines them (the definitions Megatron's datasets were
// made with until its newer megatron.core.tokenizers), reproduced id for id on a SentencePiece
// model. What preprocess_data.py writes per document (its Encoder.encode): the type's ids of the
// text, then with --append-eod the type's eod, but only when the document has ids; an empty text is
// still a document (of no sequence).
//
//   GPTSentencePieceTokenizer  the model's ids of the text; eod = the model's eos; vocab_size = the
//                              model's pieces.
//   Llama2Tokenizer            the model's bos, then the model's ids of the text (so an empty text is
//                              [bos], and [bos, eos] with --append-eod); eod = the model's eos;
//                              vocab_size = the model's pieces.
//   SentencePieceTokenizer     adds the pieces <CLS>, <SEP>, <EOD>, <MASK>, then the model's pad,
//                              bos and eos pieces (<PAD>, <BOS>, <EOS> where the model has no such
//                              id), each one the model lacks taking the next id after its pieces;
//                              vocab_size counts them. Text: wherever one of these seven strings
//                              occurs it is that one id (the earliest occurrence first, a tie to the
//                              one added first); the text between is encoded on its own. eod = the
//                              id of <EOD>, beyond the model's pieces unless the model has <EOD>.
//
// Every other type (GPT2BPETokenizer, BertWordPiece*, HuggingFaceTokenizer, TikTokenizer,
// NullTokenizer, ...) is refused: loom encodes SentencePiece models only. The dtype of the dataset
// follows Megatron's rule on vocab_size (loom/megatron_format.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/spm/sentencepiece_model.h"
#include "loom/tokenize/pipeline.h"

namespace loom::tokenize {

enum class MegatronTokenizerType { kGptSentencePiece, kSentencePiece, kLlama2 };

// Parses --tokenizer-type; throws UsageError with the reason for every other name.
MegatronTokenizerType parse_megatron_tokenizer_type(const std::string& name);
const char* megatron_tokenizer_type_name(MegatronTokenizerType type);

struct MegatronTokenizer {
  MegatronTokenizerType type = MegatronTokenizerType::kGptSentencePiece;
  uint64_t vocab_size = 0;  // Megatron's tokenizer.vocab_size: the id limit and the dtype
  int64_t bos_id = -1;      // prepended to every document (Llama2Tokenizer), else -1
  int64_t eod_id = -1;      // what --append-eod appends; -1: none (the model has no eos)
  SpecialPieces specials;   // SentencePieceTokenizer's, in the order it adds them
};

// The type's facts for this model; throws naming the model when the type cannot use it (a
// Llama2Tokenizer on a model without bos; --append-eod where the eod would be -1).
MegatronTokenizer make_megatron_tokenizer(MegatronTokenizerType type, const SentencePieceModel& model, bool append_eod);

// Sets the pipeline's document rules to what preprocess_data.py does with this tokenizer.
void apply_megatron_rules(const MegatronTokenizer& tokenizer, bool append_eod, PipelineOptions& options);

// Appends the ids of text with the strings of `specials` taken out as their ids and the text
// between encoded on its own (SentencePieceTokenizer.tokenize). continuation: text continues a
// document cut before it (its first stretch is encoded as SentencePieceModel::encode_continuation).
void encode_with_specials(const SentencePieceModel& model, const SpecialPieces& specials, std::string_view text,
                          bool continuation, std::vector<uint32_t>& out);

}  // namespace loom::tokenize
