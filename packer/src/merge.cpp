#include "loom/packer/merge.h"

#include "documents.h"
#include "loom/progress.h"
#include "loom/sys.h"

namespace loom::packer {

MergeReport merge_shards(const ShardSet& inputs, const std::string& output_bin) {
  std::vector<std::string> bins;
  for (size_t s = 0; s < inputs.size(); ++s) bins.push_back(inputs.shard(s).bin_path());
  sys::check_outputs_spare_inputs(shard_files(bins), {output_bin, meta_path_for(output_bin)});
  const std::string dir = sys::dirname(output_bin);
  if (!dir.empty()) sys::make_dirs(dir);
  ShardWriter writer(output_bin, inputs.tokenizer());
  Progress progress("merge", inputs.num_docs(), "docs");
  for (size_t s = 0; s < inputs.size(); ++s)
    for_each_doc_checked(inputs.shard(s), [&](uint64_t, const std::vector<uint32_t>& ids) {
      writer.add_doc(ids);
      progress.add(1);
    });
  writer.commit();
  progress.finish();
  return {inputs.size(), writer.num_docs(), writer.num_tokens()};
}

}  // namespace loom::packer
