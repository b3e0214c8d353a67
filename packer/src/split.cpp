#include "loom/packer/split.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "documents.h"
#include "loom/error.h"
#include "loom/hash.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "loom/sys.h"

namespace loom::packer {

uint64_t split_score(uint64_t seed, uint64_t doc) {
  const uint64_t key[2] = {seed, doc};
  return xxh64(key, sizeof(key));
}

namespace {
// Marks the k documents of smallest (score, d) valid: --valid-docs' choice, and the minimum that
// --min-valid-docs adds (the documents nearest the fraction's cut).
void mark_lowest_scored(std::vector<bool>& valid, uint64_t seed, uint64_t k) {
  std::vector<std::pair<uint64_t, uint64_t>> scored(valid.size());
  for (uint64_t d = 0; d < valid.size(); ++d) scored[d] = {split_score(seed, d), d};
  std::nth_element(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(k), scored.end());
  for (uint64_t i = 0; i < k; ++i) valid[scored[i].second] = true;
}

std::vector<bool> choose_valid(uint64_t num_docs, const SplitOptions& o) {
  std::vector<bool> valid(num_docs, false);
  if (o.valid_fraction >= 0) {
    LOOM_CHECK(o.valid_fraction <= 1, "--valid-fraction ", o.valid_fraction, " must be in [0, 1]");
    // Compared in long double so F = 1 takes every document and tiny F stays exact enough.
    const long double cut = static_cast<long double>(o.valid_fraction) * 18446744073709551616.0L;
    uint64_t chosen = 0;
    for (uint64_t d = 0; d < num_docs; ++d) {
      valid[d] = static_cast<long double>(split_score(o.seed, d)) < cut;
      chosen += valid[d];
    }
    // A small input would often give valid nothing: the documents of smallest (score, d), the ones
    // nearest the cut, make up the minimum. An input that reached it is split as without it.
    LOOM_CHECK(o.min_valid_docs >= 0, "--min-valid-docs ", o.min_valid_docs, " must be >= 0");
    const uint64_t want = num_docs > 0 ? std::min<uint64_t>(static_cast<uint64_t>(o.min_valid_docs), num_docs - 1) : 0;
    if (chosen < want) mark_lowest_scored(valid, o.seed, want);
    return valid;
  }
  LOOM_CHECK(o.valid_docs >= 0, "give --valid-fraction or --valid-docs");
  LOOM_CHECK(static_cast<uint64_t>(o.valid_docs) <= num_docs, "--valid-docs ", o.valid_docs, " > the ", num_docs,
             " documents of the inputs");
  mark_lowest_scored(valid, o.seed, static_cast<uint64_t>(o.valid_docs));
  return valid;
}
}  // namespace

SplitReport split_shards(const ShardSet& inputs, const std::vector<std::string>& input_paths,
                         const SplitOptions& options) {
  LOOM_ASSERT(input_paths.size() == inputs.size(), "one path per shard");
  const std::vector<std::string> names = unique_basenames(input_paths);
  const std::vector<bool> valid = choose_valid(inputs.num_docs(), options);
  const std::string train_dir = options.output_dir + "/train", valid_dir = options.output_dir + "/valid";
  // Both sides' files, also the one an empty side removes.
  std::vector<std::string> outputs;
  for (const std::string& name : names)
    for (const std::string& dir : {train_dir, valid_dir})
      outputs.insert(outputs.end(), {dir + "/" + name, meta_path_for(dir + "/" + name)});
  sys::check_outputs_spare_inputs(shard_files(input_paths), outputs);
  sys::make_dirs(train_dir);
  sys::make_dirs(valid_dir);
  SplitReport rep;
  Progress progress("split", inputs.num_docs(), "docs");
  for (size_t s = 0; s < inputs.size(); ++s) {
    const ShardReader& r = inputs.shard(s);
    ShardWriter train(train_dir + "/" + names[s], inputs.tokenizer());
    ShardWriter val(valid_dir + "/" + names[s], inputs.tokenizer());
    for_each_doc_checked(r, [&](uint64_t i, const std::vector<uint32_t>& ids) {
      (valid[inputs.first_doc(s) + i] ? val : train).add_doc(ids);
      progress.add(1);
    });
    for (ShardWriter* w : {&train, &val}) {
      if (w->num_docs() == 0) {
        log::info("split: ", names[s], ": no ", w == &train ? "train" : "valid", " document, that side is not written");
        sys::remove_file((w == &train ? train_dir : valid_dir) + "/" + names[s]);
        sys::remove_file(meta_path_for((w == &train ? train_dir : valid_dir) + "/" + names[s]));
        continue;
      }
      w->commit();
    }
    rep.train_docs += train.num_docs();
    rep.train_tokens += train.num_tokens();
    rep.valid_docs += val.num_docs();
    rep.valid_tokens += val.num_tokens();
  }
  progress.finish();
  return rep;
}

}  // namespace loom::packer
