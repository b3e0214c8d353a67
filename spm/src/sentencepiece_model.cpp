#include "loom/spm/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/spm_encoder.h"
#include "loom/spm_model.h"
#include "loom/sys.h"

namespace loom {

namespace {
// A serialized NormalizerSpec {add_dummy_prefix: false} as field 3 (normalizer_spec) of ModelProto.
// Appended to a .model it merges into the model's own spec (protobuf merges a message field that
// occurs twice, field by field, the later value winning), switching the dummy prefix off and nothing else.
constexpr char kNoDummyPrefix[] = {'\x1a', '\x02', '\x18', '\x00'};
}  // namespace

SentencePieceModel::SentencePieceModel(const std::string& model_path, EncoderChoice encoder) : path_(model_path) {
  // One read, checked (a folder, JSON, an empty file are refused by name): the fingerprint is of
  // the bytes loom's encoder is built from.
  const std::string bytes = spm::read_spm_model_bytes(model_path);
  fingerprint_ = xxh64(bytes.data(), bytes.size());
  bool self_test = false;
  if (encoder != EncoderChoice::kSentencePiece) {
    try {
      spm::SpmModel m = spm::parse_spm_model(bytes, model_path);
      self_test = m.has_self_test;
      loom_ = std::make_unique<spm::SpmEncoder>(std::move(m));
    } catch (const Error& e) {
      LOOM_CHECK(encoder == EncoderChoice::kAuto, model_path, ": loom's encoder cannot encode this model: ", e.what(),
                 "; use --encoder sentencepiece (or auto)");
      why_not_loom_ = e.what();
    }
  }
  if (loom_ && !self_test) {
    // As libsentencepiece's bos_id()/eos_id(): the id of the trainer's bos/eos piece if it is a
    // control piece, else -1.
    const spm::SpmModel& m = loom_->model();
    const auto control_id = [&](const std::string& piece) {
      const int id = loom_->piece_to_id(piece);
      return m.types[id] == spm::kSpmControl ? id : -1;
    };
    vocab_size_ = static_cast<uint32_t>(m.size());
    bos_id_ = control_id(m.bos_piece);
    eos_id_ = control_id(m.eos_piece);
    return;
  }
  const sentencepiece::SentencePieceProcessor& sp = processor();
  vocab_size_ = static_cast<uint32_t>(sp.GetPieceSize());
  bos_id_ = sp.bos_id();
  eos_id_ = sp.eos_id();
  if (loom_) return;
  sp_no_prefix_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto no_prefix =
      sp_no_prefix_->LoadFromSerializedProto(bytes + std::string(kNoDummyPrefix, sizeof(kNoDummyPrefix)));
  LOOM_CHECK(no_prefix.ok(), model_path, ": SentencePiece cannot load it without the dummy prefix: ",
             no_prefix.ToString());
}

void SentencePieceModel::load_processor() const {
  // Loaded later than loom's encoder: the bytes it was built from (fingerprint_), not a file
  // changed since.
  const std::string bytes = sys::read_file(path_);
  LOOM_CHECK(xxh64(bytes.data(), bytes.size()) == fingerprint_, path_,
             ": the model file changed while it was in use (its XXH64 differs from the one read at start)");
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->LoadFromSerializedProto(absl::string_view(bytes.data(), bytes.size()));
  LOOM_CHECK(status.ok(), path_, ": not a SentencePiece model: ", status.ToString(), "; ", spm::kSpmModelExpected);
  sp_ = std::move(sp);
  sp_loaded_ = true;
}

const sentencepiece::SentencePieceProcessor& SentencePieceModel::processor() const {
  std::call_once(sp_once_, [this] { load_processor(); });
  return *sp_;
}

bool SentencePieceModel::sentencepiece_loaded() const { return sp_loaded_; }

SentencePieceModel::~SentencePieceModel() = default;

int32_t SentencePieceModel::pad_id() const { return processor().pad_id(); }

std::string SentencePieceModel::id_to_piece(uint32_t id) const {
  LOOM_ASSERT(id < vocab_size_, "piece id ", id, " of ", vocab_size_);
  return processor().IdToPiece(static_cast<int>(id));
}

int32_t SentencePieceModel::piece_to_id(const std::string& piece) const {
  // PieceToId answers unk_id for a piece it lacks: only an id whose piece is this one counts.
  const sentencepiece::SentencePieceProcessor& sp = processor();
  const int id = sp.PieceToId(piece);
  return id >= 0 && static_cast<uint32_t>(id) < vocab_size_ && sp.IdToPiece(id) == piece ? id : -1;
}

uint32_t SentencePieceModel::encoder() const { return loom_ ? kShardEncoderLoom : kShardEncoderSentencePiece; }
const char* SentencePieceModel::encoder_name() const { return loom_ ? "loom" : "sentencepiece"; }

TokenizerInfo SentencePieceModel::info(bool bos, bool eos) const {
  LOOM_CHECK(!bos || bos_id_ >= 0, path_, ": the model has no BOS id (bos_id = -1); run with --no-bos");
  LOOM_CHECK(!eos || eos_id_ >= 0, path_, ": the model has no EOS id (eos_id = -1); run with --no-eos");
  TokenizerInfo info;
  info.vocab_size = vocab_size_;
  info.bos_id = bos_id_;
  info.eos_id = eos_id_;
  info.flags = (bos ? kShardFlagBos : 0) | (eos ? kShardFlagEos : 0);
  info.model_fingerprint = fingerprint_;
  return info;
}

void SentencePieceModel::encode(std::string_view text, std::vector<uint32_t>& out) const {
  encode_with(sp_.get(), true, text, out);
}

void SentencePieceModel::encode_continuation(std::string_view text, std::vector<uint32_t>& out) const {
  if (text.empty()) return;
  // A piece may start with whitespace (the cut went just before it). Whether the model drops it
  // (the prefix then stands for it) shows in how the prefix-free encoder treats it before a letter.
  const auto c = static_cast<unsigned char>(text[0]);
  if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f) || c >= 0x80) {
    size_t len = 1;
    while (len < text.size() && (static_cast<unsigned char>(text[len]) & 0xC0) == 0x80) ++len;
    std::vector<uint32_t> with_space, alone;
    encode_with(sp_no_prefix_.get(), false, std::string(text.substr(0, len)) + "a", with_space);
    encode_with(sp_no_prefix_.get(), false, "a", alone);
    if (with_space == alone) return encode(text, out);
  }
  encode_with(sp_no_prefix_.get(), false, text, out);
}

void SentencePieceModel::encode_with(const sentencepiece::SentencePieceProcessor* sp, bool dummy_prefix,
                                     std::string_view text, std::vector<uint32_t>& out) const {
  if (loom_) return loom_->encode(text, out, dummy_prefix);
  // Thread-local scratch: Encode() fills a vector<int>.
  thread_local std::vector<int> ids;
  ids.clear();
  const auto status = sp->Encode(absl::string_view(text.data(), text.size()), &ids);
  LOOM_CHECK(status.ok(), path_, ": SentencePiece failed to encode a document of ", text.size(),
             " bytes: ", status.ToString());
  for (int id : ids) {
    LOOM_ASSERT(id >= 0 && static_cast<uint32_t>(id) < vocab_size_, "SentencePiece returned id ", id);
    out.push_back(static_cast<uint32_t>(id));
  }
}

std::string SentencePieceModel::decode(const std::vector<uint32_t>& ids) const {
  for (uint32_t id : ids)
    LOOM_CHECK(id < vocab_size_, "token id ", id, " >= the model's vocab size ", vocab_size_,
               "; is this the model the shard was made with?");
  const std::vector<int> v(ids.begin(), ids.end());
  std::string text;
  const auto status = processor().Decode(v, &text);
  LOOM_CHECK(status.ok(), path_, ": SentencePiece cannot decode: ", status.ToString());
  return text;
}

}  // namespace loom
