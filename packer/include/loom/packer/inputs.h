// The inputs of loom-pack: command-line paths (files or folders) expanded to shards, and a set of
// loom token shards that share one tokenizer, addressed as one sequence of documents ("global"
// document index = inputs in command-line order, documents in shard order).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/error.h"
#include "loom/shard_format.h"

namespace loom::packer {

class ShardSet {
 public:
  // Opens every shard (ShardReader's O(num_docs) checks) and checks they share one tokenizer and
  // dtype (check_same_tokenizer).
  explicit ShardSet(const std::vector<std::string>& bin_paths);

  size_t size() const { return shards_.size(); }
  const ShardReader& shard(size_t i) const { return *shards_[i]; }
  TokenizerInfo tokenizer() const { return shards_.front()->tokenizer(); }
  uint32_t dtype_bytes() const { return shards_.front()->dtype_bytes(); }
  uint64_t num_docs() const { return doc_starts_.back(); }
  uint64_t num_tokens() const { return num_tokens_; }
  uint64_t token_bytes() const { return num_tokens_ * dtype_bytes(); }
  // Global index of shard i's first document.
  uint64_t first_doc(size_t i) const { return doc_starts_[i]; }
  // Global index of shard i's first token.
  uint64_t first_token(size_t i) const { return token_starts_[i]; }
  // (shard, local document) of a global document index.
  std::pair<size_t, uint64_t> locate(uint64_t doc) const;
  // The bytes of global tokens [t, t+n) (all shards' tokens back to back), which lie in one shard.
  const uint8_t* token_span(uint64_t t, uint64_t n) const {
    size_t s = 0;
    if (shards_.size() > 1) s = static_cast<size_t>(std::upper_bound(token_starts_.begin(), token_starts_.end(), t) - token_starts_.begin()) - 1;
    LOOM_ASSERT(t >= token_starts_[s] && t + n <= token_starts_[s + 1], "tokens ", t, "+", n, " cross a shard or the end");
    return shards_[s]->token_bytes() + (t - token_starts_[s]) * dtype_bytes();
  }
  // Every document's length, in global order (the length index bestfit plans from).
  std::vector<uint64_t> doc_lengths() const;

 private:
  std::vector<std::unique_ptr<ShardReader>> shards_;
  std::vector<uint64_t> doc_starts_{0}, token_starts_{0};
  uint64_t num_tokens_ = 0;
};

// Every file of these shards (each .bin, its .meta and a Megatron NAME.idx): what an output must
// not replace.
std::vector<std::string> shard_files(const std::vector<std::string>& bin_paths);

// "NAME.bin" of a shard path, refusing two inputs that would write the same output name.
std::vector<std::string> unique_basenames(const std::vector<std::string>& bin_paths);

}  // namespace loom::packer
