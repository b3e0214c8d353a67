#include "loom/packer/merge.h"

#include <vector>

#include "loom/progress.h"
#include "loom/sys.h"

namespace loom::packer {

MergeReport merge_shards(const ShardSet& inputs, const std::string& output_bin) {
  inputs.verify_deep("merge: verify inputs");
  const std::string dir = sys::dirname(output_bin);
  if (!dir.empty()) sys::make_dirs(dir);
  ShardWriter writer(output_bin, inputs.tokenizer());
  Progress progress("merge", inputs.num_docs(), "docs");
  std::vector<uint32_t> ids;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const ShardReader& r = inputs.shard(s);
    for (uint64_t i = 0; i < r.num_docs(); ++i) {
      ids.clear();
      r.read_doc(i, ids);
      writer.add_doc(ids);
      progress.add(1);
    }
  }
  writer.commit();
  progress.finish();
  return {inputs.size(), writer.num_docs(), writer.num_tokens()};
}

}  // namespace loom::packer
