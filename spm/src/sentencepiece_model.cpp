#include "loom/spm/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/spm_encoder.h"
#include "loom/sys.h"

namespace loom {

SentencePieceModel::SentencePieceModel(const std::string& model_path, EncoderChoice encoder)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  LOOM_CHECK(sys::exists(model_path), model_path, ": no such SentencePiece model file");
  const auto status = sp_->Load(model_path);
  LOOM_CHECK(status.ok(), model_path, ": not a SentencePiece model: ", status.ToString());
  vocab_size_ = static_cast<uint32_t>(sp_->GetPieceSize());
  bos_id_ = sp_->bos_id();
  eos_id_ = sp_->eos_id();
  fingerprint_ = xxh64_file(model_path);
  if (encoder == EncoderChoice::kSentencePiece) return;
  try {
    loom_ = std::make_unique<spm::SpmEncoder>(spm::read_spm_model(model_path));
  } catch (const Error& e) {
    LOOM_CHECK(encoder == EncoderChoice::kAuto, model_path, ": loom's encoder cannot encode this model: ", e.what(),
               "; use --encoder sentencepiece (or auto)");
    why_not_loom_ = e.what();
  }
}

SentencePieceModel::~SentencePieceModel() = default;

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
  if (loom_) return loom_->encode(text, out);
  // Thread-local scratch: Encode() fills a vector<int>.
  thread_local std::vector<int> ids;
  ids.clear();
  const auto status = sp_->Encode(absl::string_view(text.data(), text.size()), &ids);
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
