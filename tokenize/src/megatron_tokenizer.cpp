#include "loom/tokenize/megatron_tokenizer.h"

#include "loom/cli.h"
#include "loom/error.h"

namespace loom::tokenize {

MegatronTokenizerType parse_megatron_tokenizer_type(const std::string& name) {
  if (name == "GPTSentencePieceTokenizer") return MegatronTokenizerType::kGptSentencePiece;
  if (name == "SentencePieceTokenizer") return MegatronTokenizerType::kSentencePiece;
  if (name == "Llama2Tokenizer") return MegatronTokenizerType::kLlama2;
  const bool megatrons = name == "GPT2BPETokenizer" || name == "BertWordPieceLowerCase" ||
                         name == "BertWordPieceCase" || name == "HuggingFaceTokenizer" || name == "TikTokenizer" ||
                         name == "Llama3Tokenizer" || name == "MistralTokenizer" || name == "NullTokenizer" ||
                         name == "MultimodalTokenizer" || name == "NullMultimodalTokenizer" || name == "SFTTokenizer";
  throw UsageError(str("--tokenizer-type ", name, ": ",
                       megatrons ? "a Megatron-LM tokenizer type that is not a SentencePiece model; loom encodes "
                                   "SentencePiece models only"
                                 : "not a Megatron-LM tokenizer type loom knows",
                       "; loom reproduces GPTSentencePieceTokenizer, SentencePieceTokenizer and Llama2Tokenizer"));
}

const char* megatron_tokenizer_type_name(MegatronTokenizerType type) {
  switch (type) {
    case MegatronTokenizerType::kGptSentencePiece: return "GPTSentencePieceTokenizer";
    case MegatronTokenizerType::kSentencePiece: return "SentencePieceTokenizer";
    case MegatronTokenizerType::kLlama2: return "Llama2Tokenizer";
  }
  return "?";
}

MegatronTokenizer make_megatron_tokenizer(MegatronTokenizerType type, const SentencePieceModel& model,
                                          bool append_eod) {
  MegatronTokenizer t;
  t.type = type;
  t.vocab_size = model.vocab_size();
  const char* name = megatron_tokenizer_type_name(type);
  if (type == MegatronTokenizerType::kSentencePiece) {
    // A piece the model has keeps its id; one it lacks takes the next id after every piece so far.
    uint64_t next = model.vocab_size();
    auto add = [&](const std::string& piece) {
      for (const auto& [p, id] : t.specials)
        if (p == piece) return id;
      const int32_t have = model.piece_to_id(piece);
      const uint32_t id = have >= 0 ? static_cast<uint32_t>(have) : static_cast<uint32_t>(next++);
      t.specials.emplace_back(piece, id);
      return id;
    };
    add("<CLS>");
    add("<SEP>");
    t.eod_id = add("<EOD>");
    add("<MASK>");
    // Megatron asks the model for the piece of its pad/bos/eos id; an id of -1 has none, so it
    // adds a name of its own.
    const auto piece_or = [&](int32_t id, const char* fallback) {
      return id >= 0 ? model.id_to_piece(static_cast<uint32_t>(id)) : std::string(fallback);
    };
    add(piece_or(model.pad_id(), "<PAD>"));
    add(piece_or(model.bos_id(), "<BOS>"));
    add(piece_or(model.eos_id(), "<EOS>"));
    t.vocab_size = next;
    return t;
  }
  t.eod_id = model.eos_id();
  LOOM_CHECK(!append_eod || t.eod_id >= 0, model.path(), ": the model has no EOS piece, so ", name,
             "'s eod is -1, which --append-eod would write as an id; drop --append-eod");
  if (type == MegatronTokenizerType::kLlama2) {
    t.bos_id = model.bos_id();
    LOOM_CHECK(t.bos_id >= 0, model.path(), ": the model has no BOS piece; Llama2Tokenizer starts every document ",
               "with the model's bos id, here -1, which is no token id; use GPTSentencePieceTokenizer");
  }
  return t;
}

void apply_megatron_rules(const MegatronTokenizer& t, bool append_eod, PipelineOptions& o) {
  o.bos = t.bos_id >= 0;
  o.bos_id = t.bos_id;
  o.eos = append_eod;
  o.eos_id = t.eod_id;
  o.eos_after_ids_only = true;
  o.keep_empty = true;
  o.specials = t.specials;
}

void encode_with_specials(const SentencePieceModel& model, const SpecialPieces& specials, std::string_view text,
                          bool continuation, std::vector<uint32_t>& out) {
  // UTF-8 is self-synchronising, so a byte search finds the same occurrences as Python's search of
  // code points.
  size_t at = 0;
  bool first = true;
  const auto encode = [&](std::string_view part) {
    if (first && continuation) model.encode_continuation(part, out);
    else model.encode(part, out);
    first = false;
  };
  for (;;) {
    size_t best = std::string_view::npos;
    const std::pair<std::string, uint32_t>* which = nullptr;
    for (const auto& s : specials) {
      const size_t k = text.find(s.first, at);
      if (k < best) best = k, which = &s;  // strictly earlier: a tie goes to the one added first
    }
    if (!which) break;
    encode(text.substr(at, best - at));
    out.push_back(which->second);
    at = best + which->first.size();
  }
  encode(text.substr(at));
}

}  // namespace loom::tokenize
