// loom-pack merge --output OUT.bin INPUT...
#include "cmd_common.h"
#include "loom/count_text.h"
#include "loom/log.h"
#include "loom/packer/merge.h"

namespace loom::packer {

int cmd_merge(const Args& args) {
  OptionParser parser("loom-pack merge", "loom-pack merge --output OUT.bin INPUT...");
  parser.options().add_options()("output", po::value<std::string>(), "the merged shard's .bin path")(
      "inputs", po::value<std::vector<std::string>>(), "loom shards or folders");
  parser.positional("inputs");
  if (!parse_command(parser, args)) return kExitOk;
  const std::string out = required<std::string>(parser, "output");
  const ShardSet inputs(input_shards(parser));
  const MergeReport r = merge_shards(inputs, out);
  log::info("merge: ", counted(r.inputs, "shard"), " -> ", out, ": ", counted(r.documents, "document"), ", ",
            counted(r.tokens, "token"));
  return kExitOk;
}

}  // namespace loom::packer
