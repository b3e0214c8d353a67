// A SentencePiece model, opened for what loom-pack needs from it: the header fields of a shard
// (vocab size, bos/eos, fingerprint = XXH64 of the .model file) and decoding ids back to text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/shard_format.h"

namespace loom::packer {

class TokenizerModel {
 public:
  explicit TokenizerModel(const std::string& model_path);
  ~TokenizerModel();
  TokenizerModel(const TokenizerModel&) = delete;
  TokenizerModel& operator=(const TokenizerModel&) = delete;

  // flags are left 0: the model does not say whether bos/eos were added.
  const TokenizerInfo& info() const { return info_; }
  std::string decode(const std::vector<uint32_t>& ids) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  TokenizerInfo info_;
};

}  // namespace loom::packer
