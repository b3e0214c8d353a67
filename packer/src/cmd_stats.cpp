// loom-pack stats [--json] PATH...
#include <iostream>

#include "cmd_common.h"
#include "loom/packer/stats.h"

namespace loom::packer {

int cmd_stats(const Args& args) {
  OptionParser parser("loom-pack stats", "loom-pack stats [--json] PATH...  (files, or folders of *.bin + .meta)");
  parser.options().add_options()("json", po::bool_switch(), "print one JSON object (for machines)")(
      "inputs", po::value<std::vector<std::string>>(), "shards or folders");
  parser.positional("inputs");
  if (!parse_command(parser, args, true)) return kExitOk;  // quiet: the report is all it prints
  const Stats s = collect_stats(input_shards(parser));
  std::cout << (parser.get<bool>("json") ? stats_json(s) : stats_text(s));
  return kExitOk;
}

}  // namespace loom::packer
