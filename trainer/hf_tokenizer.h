// The SentencePiece side of HF interoperability, without linking libsentencepiece: Debian's
// libsentencepiece.so exports an embedded protobuf-lite 3.14 whose symbols clash with LibTorch's
// libprotobuf 3.21 (a process with both crashes at load), so loom-train reads the few fields it
// needs from the .model file's protobuf wire format itself:
//   ModelProto      1: repeated SentencePiece pieces, 2: TrainerSpec trainer_spec
//   SentencePiece   1: string piece, 3: Type type (1 normal, 2 unknown, 3 control, 4 user, 6 byte)
//   TrainerSpec     40: unk_id (default 0), 41: bos_id (1), 42: eos_id (2), 43: pad_id (-1)
// and writes the files that let transformers' LlamaTokenizer load the model.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom::hf {

struct SpmModel {
  std::vector<std::string> pieces;
  std::vector<int> types;
  int unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  int size() const { return static_cast<int>(pieces.size()); }
};

// Throws loom::Error naming the file and byte offset when it is not a SentencePiece model.
SpmModel read_spm_model(const std::string& path);

// SentencePiece's decoding: pieces concatenated, control pieces dropped, byte pieces <0xNN> as
// bytes, unknown as " \u2047 ", U+2581 as a space, the leading space of the text removed.
std::string decode(const SpmModel& m, const std::vector<int64_t>& ids);

// (file name, contents) of the tokenizer files of an HF folder: tokenizer.model (the file, byte
// for byte), tokenizer_config.json, special_tokens_map.json.
std::vector<std::pair<std::string, std::string>> tokenizer_files(const SpmModel& m, const std::string& model_path,
                                                                 int64_t max_positions);

}  // namespace loom::hf
