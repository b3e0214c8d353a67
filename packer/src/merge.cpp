#include "loom/packer/merge.h"

#include "documents.h"
#include "loom/progress.h"
#include "loom/sys.h"

namespace loom::packer {

MergeReport merge_shards(const ShardSet& inputs, const std::string& output_bin) {
  inputs.verify_deep("merge: verify inputs");
  const std::string dir = sys::dirname(output_bin);
  if (!dir.empty()) sys::make_dirs(dir);
  ShardWriter writer(output_bin, inputs.tokenizer());
  Progress progress("merge", inputs.num_docs(), "docs");
  for (size_t s = 0; s < inputs.size(); ++s) copy_docs(inputs.shard(s), writer, progress);
  writer.commit();
  progress.finish();
  return {inputs.size(), writer.num_docs(), writer.num_tokens()};
}

}  // namespace loom::packer
