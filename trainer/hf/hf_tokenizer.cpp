#include "hf_tokenizer.h"

#include <sstream>

#include "loom/json_text.h"
#include "loom/sys.h"

namespace loom::hf {

namespace {

std::string piece_or_null(const spm::SpmModel& m, int id) {
  return id >= 0 && id < m.size() ? json_quote(m.pieces[id]) : std::string("null");
}

}  // namespace

std::vector<std::pair<std::string, std::string>> tokenizer_files(const spm::SpmModel& m, const std::string& model_path,
                                                                 int64_t max_positions) {
  const std::string bos = piece_or_null(m, m.bos_id), eos = piece_or_null(m, m.eos_id),
                    unk = piece_or_null(m, m.unk_id), pad = piece_or_null(m, m.pad_id);
  // Which transformers class encodes text to SentencePiece's ids (+ bos), as measured with transformers
  // 5.17 on every line of botchan.txt and wagahaiwa_nekodearu.txt (bench/hf/check_logits.py --corpus):
  // - transformers 5's LlamaTokenizer is a `tokenizers` BPE built from the .model's vocabulary with a
  //   Metaspace pre-tokenizer: no charsmap, no whitespace rules, BPE merges even for a unigram model
  //   (most texts differ for the demo's unigram model). For a BPE model without normalization rules
  //   (InternLM's) it is the best there is: add_prefix_space must follow the model's add_dummy_prefix
  //   (InternLM's is false; the default prepends a U+2581 SentencePiece does not), then 99.5% of the
  //   texts are equal (its rank-ordered merges differ on some punctuation runs such as ",--").
  //   SentencePieceBackend cannot take InternLM's model: sentencepiece 0.2 refuses to load a model
  //   with a "\0" piece. transformers 4's slow LlamaTokenizer with legacy: true calls sentencepiece
  //   itself and is exact with sentencepiece < 0.2.
  // - Any other model (unigram, NFKC rules, extra-whitespace removal): SentencePieceBackend, transformers
  //   5's wrapper of the sentencepiece library (legacy: true keeps the model's normalizer as it is), with
  //   special_tokens_pattern "bos" for the leading bos: every line equal for the demo's model and the
  //   NFKC unigram one. transformers 4 has no such class: load the folder there with
  //   LlamaTokenizer.from_pretrained(dir, legacy=True) (docs/HF.md).
  const spm::SpmNormalizerSpec& ns = m.normalizer;
  const bool plain_bpe = m.model_type == spm::kSpmBpe && ns.precompiled_charsmap.empty() && !ns.remove_extra_whitespaces &&
                         ns.escape_whitespaces && !m.treat_whitespace_as_suffix;
  std::ostringstream cfg;
  cfg << "{\n"
      << "  \"tokenizer_class\": \"" << (plain_bpe ? "LlamaTokenizer" : "SentencePieceBackend") << "\",\n";
  if (plain_bpe) cfg << "  \"add_prefix_space\": " << (ns.add_dummy_prefix ? "true" : "false") << ",\n";
  else cfg << "  \"special_tokens_pattern\": \"" << (m.bos_id >= 0 ? "bos" : "none") << "\",\n";
  cfg << "  \"bos_token\": " << bos << ",\n"
      << "  \"eos_token\": " << eos << ",\n"
      << "  \"unk_token\": " << unk << ",\n"
      << "  \"pad_token\": " << pad << ",\n"
      << "  \"add_bos_token\": " << (m.bos_id >= 0 ? "true" : "false") << ",\n"
      << "  \"add_eos_token\": false,\n"
      << "  \"legacy\": true,\n"
      << "  \"clean_up_tokenization_spaces\": false,\n"
      << "  \"model_max_length\": " << max_positions << ",\n"
      << "  \"sp_model_kwargs\": {}\n"
      << "}\n";
  std::ostringstream map;
  map << "{\n  \"bos_token\": " << bos << ",\n  \"eos_token\": " << eos << ",\n  \"unk_token\": " << unk;
  if (m.pad_id >= 0) map << ",\n  \"pad_token\": " << pad;
  map << "\n}\n";
  return {{"tokenizer.model", sys::read_file(model_path)},
          {"tokenizer_config.json", cfg.str()},
          {"special_tokens_map.json", map.str()}};
}

}  // namespace loom::hf
