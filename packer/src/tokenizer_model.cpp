#include "loom/packer/tokenizer_model.h"

#include <sentencepiece_processor.h>

#include "loom/error.h"
#include "loom/hash.h"

namespace loom::packer {

struct TokenizerModel::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

TokenizerModel::TokenizerModel(const std::string& model_path) : impl_(std::make_unique<Impl>()) {
  const auto status = impl_->sp.Load(model_path);
  LOOM_CHECK(status.ok(), model_path, ": cannot load the SentencePiece model: ", status.ToString());
  info_.vocab_size = static_cast<uint32_t>(impl_->sp.GetPieceSize());
  info_.bos_id = impl_->sp.bos_id();
  info_.eos_id = impl_->sp.eos_id();
  info_.model_fingerprint = xxh64_file(model_path);
}

TokenizerModel::~TokenizerModel() = default;

std::string TokenizerModel::decode(const std::vector<uint32_t>& ids) const {
  std::vector<int> v(ids.begin(), ids.end());
  for (int id : v)
    LOOM_CHECK(id >= 0 && static_cast<uint32_t>(id) < info_.vocab_size, "token id ", id, " >= the model's vocab size ",
               info_.vocab_size, "; is this the model the shard was made with?");
  std::string text;
  const auto status = impl_->sp.Decode(v, &text);
  LOOM_CHECK(status.ok(), "SentencePiece cannot decode: ", status.ToString());
  return text;
}

}  // namespace loom::packer
