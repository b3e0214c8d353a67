// loom-pack head --model M.model [-n N] PATH
#include <iostream>

#include "cmd_common.h"
#include "loom/packer/head.h"
#include "loom/spm/sentencepiece_model.h"

namespace loom::packer {

int cmd_head(const Args& args) {
  OptionParser parser("loom-pack head", "loom-pack head --model M.model [-n N] PATH");
  parser.options().add_options()("model", po::value<std::string>(), "the SentencePiece .model to decode with")(
      "n,n", po::value<std::string>()->default_value("5"), "how many documents (packs for a packed shard), 0 to 2^63-1")(
      "inputs", po::value<std::vector<std::string>>(), "one shard");
  parser.positional("inputs");
  if (!parse_command(parser, args)) return kExitOk;
  const std::vector<std::string> paths = input_shards(parser);
  if (paths.size() != 1) throw UsageError("head takes one shard");
  const uint64_t n = parser.get_uint("n", 0, static_cast<uint64_t>(INT64_MAX));
  const SentencePieceModel model(required<std::string>(parser, "model"));
  print_head(paths.front(), model, n, std::cout);
  return kExitOk;
}

}  // namespace loom::packer
