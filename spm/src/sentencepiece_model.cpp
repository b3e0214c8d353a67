#include "loom/spm/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include <exception>
#include <system_error>
#include <thread>

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

SentencePieceModel::SentencePieceModel(const std::string& model_path, EncoderChoice encoder)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  spm::check_spm_model_file(model_path);
  // libsentencepiece's processor (the model's check, its ids, decode()) and loom's two encoders are
  // built from the file independently: loom's on a second thread while this one loads
  // libsentencepiece's. The processor without the dummy prefix is built only when loom's encoder
  // is not used (only encode_continuation reads it, through libsentencepiece). InternLM's model,
  // 2 cores: processor 0.03-0.05 s, the one without prefix as much, loom's two 0.02 s together;
  // loading took 0.08-0.10 s one after the other, 0.05 s now.
  std::unique_ptr<spm::SpmEncoder> loom, loom_no_prefix;
  std::exception_ptr loom_error;
  const auto build_loom = [&] {
    try {
      spm::SpmModel m = spm::read_spm_model(model_path);
      loom = std::make_unique<spm::SpmEncoder>(m);
      m.normalizer.add_dummy_prefix = false;
      loom_no_prefix = std::make_unique<spm::SpmEncoder>(std::move(m));
    } catch (...) {
      loom_error = std::current_exception();
    }
  };
  std::thread loom_thread;
  // Joined on every way out: Load() below may throw (bad_alloc on a hostile file), and destroying a
  // joinable thread ends the process where an error should be reported.
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{loom_thread};
  if (encoder != EncoderChoice::kSentencePiece) {
    try {
      loom_thread = std::thread(build_loom);
    } catch (const std::system_error&) {
      build_loom();  // no thread to spare: one after the other
    }
  }
  const auto status = sp_->Load(model_path);
  if (loom_thread.joinable()) loom_thread.join();
  LOOM_CHECK(status.ok(), model_path, ": not a SentencePiece model: ", status.ToString(), "; ", spm::kSpmModelExpected);
  vocab_size_ = static_cast<uint32_t>(sp_->GetPieceSize());
  bos_id_ = sp_->bos_id();
  eos_id_ = sp_->eos_id();
  fingerprint_ = xxh64_file(model_path);
  if (encoder != EncoderChoice::kSentencePiece) {
    try {
      if (loom_error) std::rethrow_exception(loom_error);
      loom_ = std::move(loom);
      loom_no_prefix_ = std::move(loom_no_prefix);
      return;
    } catch (const Error& e) {
      LOOM_CHECK(encoder == EncoderChoice::kAuto, model_path, ": loom's encoder cannot encode this model: ", e.what(),
                 "; use --encoder sentencepiece (or auto)");
      why_not_loom_ = e.what();
    }
  }
  sp_no_prefix_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto no_prefix = sp_no_prefix_->LoadFromSerializedProto(sys::read_file(model_path) +
                                                                std::string(kNoDummyPrefix, sizeof(kNoDummyPrefix)));
  LOOM_CHECK(no_prefix.ok(), model_path, ": SentencePiece cannot load it without the dummy prefix: ",
             no_prefix.ToString());
}

SentencePieceModel::~SentencePieceModel() = default;

int32_t SentencePieceModel::pad_id() const { return sp_->pad_id(); }

std::string SentencePieceModel::id_to_piece(uint32_t id) const {
  LOOM_ASSERT(id < vocab_size_, "piece id ", id, " of ", vocab_size_);
  return sp_->IdToPiece(static_cast<int>(id));
}

int32_t SentencePieceModel::piece_to_id(const std::string& piece) const {
  // PieceToId answers unk_id for a piece it lacks: only an id whose piece is this one counts.
  const int id = sp_->PieceToId(piece);
  return id >= 0 && static_cast<uint32_t>(id) < vocab_size_ && sp_->IdToPiece(id) == piece ? id : -1;
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
  encode_with(sp_.get(), loom_.get(), text, out);
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
    encode_with(sp_no_prefix_.get(), loom_no_prefix_.get(), std::string(text.substr(0, len)) + "a", with_space);
    encode_with(sp_no_prefix_.get(), loom_no_prefix_.get(), "a", alone);
    if (with_space == alone) return encode(text, out);
  }
  encode_with(sp_no_prefix_.get(), loom_no_prefix_.get(), text, out);
}

void SentencePieceModel::encode_with(const sentencepiece::SentencePieceProcessor* sp, const spm::SpmEncoder* loom,
                                     std::string_view text, std::vector<uint32_t>& out) const {
  if (loom) return loom->encode(text, out);
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
  const auto status = sp_->Decode(v, &text);
  LOOM_CHECK(status.ok(), path_, ": SentencePiece cannot decode: ", status.ToString());
  return text;
}

}  // namespace loom
