// Helpers shared by the subcommand files: option parsing with usage errors, input expansion.
#pragma once

#include <string>
#include <vector>

#include "loom/options.h"
#include "loom/packer/commands.h"

namespace loom::packer {

// Parses args; false when --help was printed. Throws OptionParser's UsageError without its
// "loom-pack SUB: " prefix (main() adds it). Logs the
// resolved configuration (log::info) unless quiet.
bool parse_command(OptionParser& parser, const Args& args, bool quiet = false);
// The positional "inputs" option expanded to shard paths (files, or folders of *.bin + .meta);
// UsageError when none was given.
std::vector<std::string> input_shards(const OptionParser& parser);
// The value of a required option, or UsageError.
template <typename T>
T required(const OptionParser& parser, const std::string& key) {
  if (!parser.vm().count(key)) throw UsageError(str("missing --", key, " (see --help)"));
  return parser.get<T>(key);
}

}  // namespace loom::packer
