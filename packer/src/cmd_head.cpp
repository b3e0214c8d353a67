// loom-pack head --model M.model [-n N] PATH
#include <iostream>

#include "cmd_common.h"
#include "loom/packer/head.h"
#include "loom/spm/sentencepiece_model.h"

namespace loom::packer {

int cmd_head(const Args& args) {
  OptionParser parser("loom-pack head", "loom-pack head --model M.model [-n N] PATH");
  parser.options().add_options()("model", po::value<std::string>(), "the SentencePiece .model to decode with")(
      "n,n", po::value<uint64_t>()->default_value(5), "how many documents (packs for a packed shard)")(
      "inputs", po::value<std::vector<std::string>>(), "one shard");
  parser.positional("inputs");
  if (!parse_command(parser, args)) return kExitOk;
  const std::vector<std::string> paths = input_shards(parser);
  if (paths.size() != 1) throw UsageError("head takes one shard");
  const SentencePieceModel model(required<std::string>(parser, "model"));
  print_head(paths.front(), model, parser.get<uint64_t>("n"), std::cout);
  return kExitOk;
}

}  // namespace loom::packer
