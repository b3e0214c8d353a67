// The tokenizer files of an HF model folder, written from a SentencePiece model (loom/spm_model.h)
// so that AutoTokenizer of transformers 4 and 5 loads the model (as LlamaTokenizer).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/spm_model.h"

namespace loom::hf {

// (file name, contents) of the tokenizer files of an HF folder: tokenizer.model (the file, byte
// for byte), tokenizer_config.json, special_tokens_map.json.
std::vector<std::pair<std::string, std::string>> tokenizer_files(const spm::SpmModel& m, const std::string& model_path,
                                                                 int64_t max_positions);

}  // namespace loom::hf
