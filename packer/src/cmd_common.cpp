#include "cmd_common.h"

#include "loom/log.h"
#include "loom/packer/inputs.h"

namespace loom::packer {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"verify", "check shards (any kind); --deep also ids and checksums", cmd_verify},
      {"stats", "documents, tokens, lengths, dtype, tokenizer; --json for machines", cmd_stats},
      {"head", "decode the first documents with a SentencePiece model", cmd_head},
      {"merge", "one loom shard from many", cmd_merge},
      {"split", "deterministic train/valid split by document", cmd_split},
      {"convert", "loom <-> InternLM shards, lossless", cmd_convert},
      {"pack", "fixed-length training sequences that keep document boundaries", cmd_pack},
  };
  return table;
}

bool parse_command(OptionParser& parser, const Args& args, bool quiet) {
  try {
    if (!parser.parse(args)) return false;
  } catch (const UsageError& e) {
    // main() names the subcommand already: drop the parser's "loom-pack SUB: " prefix.
    std::string what = e.what();
    const size_t colon = what.find(": ");
    if (what.rfind("loom-pack ", 0) == 0 && colon != std::string::npos) what.erase(0, colon + 2);
    throw UsageError(what);
  }
  if (!quiet) {
    std::string ini = parser.changed_ini();  // the defaults are in --help
    if (!ini.empty() && ini.back() == '\n') ini.pop_back();
    log::info("configuration (what differs from the defaults):\n", ini.empty() ? "(all defaults)" : ini);
  }
  return true;
}

std::vector<std::string> input_shards(const OptionParser& parser) {
  if (!parser.vm().count("inputs") || parser.get<std::vector<std::string>>("inputs").empty())
    throw UsageError("no input given (see --help)");
  return expand_shard_paths(parser.get<std::vector<std::string>>("inputs"));
}

}  // namespace loom::packer
