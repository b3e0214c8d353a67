#include "hf_tokenizer.h"

#include <sstream>

#include "loom/json_text.h"
#include "loom/log.h"
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
  // One class that AutoTokenizer resolves in transformers 4 and 5 alike: LlamaTokenizer. Both look up
  // tokenizer_config.json's tokenizer_class by name (4: "<class>Fast" first, then "<class>"; an unknown
  // name such as 5's "SentencePieceBackend" is "Tokenizer class ... does not exist or is not currently
  // imported"), and both know LlamaTokenizer for config.json's model_type llama.
  // - transformers 4: LlamaTokenizerFast, converted from tokenizer.model (an add_prefix_space forces the
  //   conversion; it needs the sentencepiece and protobuf packages), or with use_fast=False the slow
  //   LlamaTokenizer, which with legacy: true calls sentencepiece itself and is exact.
  // - transformers 5: LlamaTokenizer is a `tokenizers` BPE built from the .model's vocabulary with a
  //   Metaspace pre-tokenizer, as measured with 5.17 on every line of botchan.txt and
  //   wagahaiwa_nekodearu.txt (bench/hf/check_logits.py --corpus): 99.5% of the texts equal for a plain
  //   BPE model (InternLM's) once add_prefix_space follows the model's add_dummy_prefix; a unigram model
  //   or one with normalization rules differs on half of the texts or more. For those, 5's
  //   AutoTokenizer.from_pretrained(dir, backend="sentencepiece") wraps the sentencepiece library
  //   (SentencePieceBackend, which was exact on every line), and 4's use_fast=False is exact.
  // add_bos_token: SentencePiece's ids + bos, as loom-tokenize writes them.
  const spm::SpmNormalizerSpec& ns = m.normalizer;
  if (m.model_type != spm::kSpmBpe || !ns.precompiled_charsmap.empty())
    log::warn(model_path, ": a ", m.model_type == spm::kSpmBpe ? "BPE model with normalization rules" : "non-BPE model",
              ": transformers 5's default LlamaTokenizer gives other ids than training for many texts; load the "
              "export with AutoTokenizer.from_pretrained(dir, backend=\"sentencepiece\") in transformers 5, "
              "use_fast=False in 4 (both exact; docs/HF.md)");
  std::ostringstream cfg;
  cfg << "{\n"
      << "  \"tokenizer_class\": \"LlamaTokenizer\",\n"
      << "  \"add_prefix_space\": " << (ns.add_dummy_prefix ? "true" : "false") << ",\n"
      << "  \"bos_token\": " << bos << ",\n"
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
