#include "loom/packer/inputs.h"

#include <algorithm>
#include <set>

#include "loom/error.h"
#include "loom/megatron_format.h"
#include "loom/progress.h"
#include "loom/sys.h"

namespace loom::packer {

ShardSet::ShardSet(const std::vector<std::string>& bin_paths) {
  LOOM_CHECK(!bin_paths.empty(), "no input shards");
  for (const std::string& p : bin_paths) {
    const ShardKind kind = detect_shard_kind(p);
    LOOM_CHECK(kind == ShardKind::kLoom || kind == ShardKind::kUnknown, p, ": is a ", shard_kind_name(kind),
               " shard, expected a loom token shard",
               kind == ShardKind::kInternlm || kind == ShardKind::kMegatron
                   ? " (convert it first: loom-pack convert --to loom)"
                   : "");
    shards_.push_back(std::make_unique<ShardReader>(p));  // kUnknown: the reader says what is wrong
    check_same_tokenizer(*shards_.front(), *shards_.back());
    doc_starts_.push_back(doc_starts_.back() + shards_.back()->num_docs());
    num_tokens_ += shards_.back()->num_tokens();
    token_starts_.push_back(num_tokens_);
  }
}

std::pair<size_t, uint64_t> ShardSet::locate(uint64_t doc) const {
  LOOM_ASSERT(doc < num_docs(), "document ", doc, " of ", num_docs());
  const size_t s = static_cast<size_t>(std::upper_bound(doc_starts_.begin(), doc_starts_.end(), doc) - doc_starts_.begin()) - 1;
  return {s, doc - doc_starts_[s]};
}

std::vector<uint64_t> ShardSet::doc_lengths() const {
  std::vector<uint64_t> lens;
  lens.reserve(num_docs());
  for (const auto& s : shards_)
    for (uint64_t i = 0; i < s->num_docs(); ++i) lens.push_back(s->doc_len(i));
  return lens;
}

std::vector<std::string> shard_files(const std::vector<std::string>& bin_paths) {
  std::vector<std::string> files;
  for (const std::string& p : bin_paths) files.insert(files.end(), {p, meta_path_for(p), megatron_idx_path(p)});
  return files;
}

std::vector<std::string> unique_basenames(const std::vector<std::string>& bin_paths) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const std::string& p : bin_paths) {
    std::string name = sys::basename(p);
    LOOM_CHECK(seen.insert(name).second, p, ": another input is also named ", name,
               "; outputs are named after inputs, so input names must differ");
    names.push_back(name);
  }
  return names;
}

}  // namespace loom::packer
