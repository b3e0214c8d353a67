// The SentencePiece side of HF interoperability, without linking libsentencepiece: Debian's
// libsentencepiece.so exports an embedded protobuf-lite 3.14 whose symbols clash with LibTorch's
// libprotobuf 3.21 (a process with both crashes at load), so loom-train reads the few fields it
// needs from the .model file's protobuf wire format itself:
//   ModelProto      1: repeated SentencePiece pieces, 2: TrainerSpec trainer_spec,
//                   3: NormalizerSpec normalizer_spec
//   SentencePiece   1: string piece, 2: float score, 3: Type type (1 normal, 2 unknown, 3 control,
//                   4 user defined, 5 unused, 6 byte)
//   TrainerSpec     3: ModelType model_type (1 unigram, 2 bpe, 3 word, 4 char; default 1),
//                   24: bool treat_whitespace_as_suffix (false), 35: bool byte_fallback (false),
//                   40: unk_id (default 0), 41: bos_id (1), 42: eos_id (2), 43: pad_id (-1),
//                   46: string bos_piece ("<s>" when empty), 47: string eos_piece ("</s>")
//   ModelProto      4: SelfTestData self_test_data (samples libsentencepiece checks at load)
//   NormalizerSpec  1: string name, 2: bytes precompiled_charsmap, 3: bool add_dummy_prefix (true),
//                   4: bool remove_extra_whitespaces (true), 5: bool escape_whitespaces (true)
// (field numbers from sentencepiece_model.proto), encodes text with them (spm_encoder.h) and decodes ids.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom::spm {

// SentencePiece::Type values.
enum SpmPieceType : int { kSpmNormal = 1, kSpmUnknown = 2, kSpmControl = 3, kSpmUserDefined = 4, kSpmUnused = 5,
                          kSpmByte = 6 };
// TrainerSpec::ModelType values.
enum SpmModelType : int { kSpmUnigram = 1, kSpmBpe = 2, kSpmWord = 3, kSpmChar = 4 };

struct SpmNormalizerSpec {
  std::string name;                  // "nmt_nfkc", "nfkc", "identity", ... (informative: the charsmap rules)
  std::string precompiled_charsmap;  // empty: no character normalization
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

struct SpmModel {
  std::vector<std::string> pieces;
  std::vector<int> types;
  std::vector<float> scores;
  int unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  // libsentencepiece's bos_id()/eos_id() are these pieces' ids when they are control pieces, else -1
  // (the ids above are what the trainer was asked for).
  std::string bos_piece = "<s>", eos_piece = "</s>";
  bool has_self_test = false;  // self_test_data present: libsentencepiece encodes its samples at load
  int model_type = kSpmUnigram;
  bool byte_fallback = false, treat_whitespace_as_suffix = false;
  SpmNormalizerSpec normalizer;
  int size() const { return static_cast<int>(pieces.size()); }
};

// What loom reads as a tokenizer model, said by every refusal of one.
inline constexpr char kSpmModelExpected[] =
    "loom reads a SentencePiece .model file (in a Hugging Face folder it is tokenizer.model)";

// The one check of a tokenizer-model path, before loom's reader or libsentencepiece parses it, and
// the file's bytes: a missing path, a folder (naming its tokenizer.model when it holds one), an
// empty file and a JSON file (Hugging Face's tokenizer.json or tokenizer_config.json: text that
// opens with '{' or '[' and holds no NUL byte, which a .model always holds) are refused with a
// loom::Error naming the path and kSpmModelExpected.
std::string read_spm_model_bytes(const std::string& path);

// Throws loom::Error naming the file, the byte offset and kSpmModelExpected when it is not a
// SentencePiece model (read_spm_model_bytes's checks first).
SpmModel read_spm_model(const std::string& path);
// The same for the file's bytes, read already (path names them in errors).
SpmModel parse_spm_model(const std::string& data, const std::string& path);

// SentencePiece's decoding: pieces concatenated, control pieces dropped, byte pieces <0xNN> as
// bytes, unknown as " \u2047 ", U+2581 as a space, the leading space of the text removed.
std::string decode(const SpmModel& m, const std::vector<int64_t>& ids);

}  // namespace loom::spm
