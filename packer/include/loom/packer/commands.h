// The subcommands of loom-pack, one file each (src/cmd_*.cpp): each parses its own options,
// prints the resolved configuration, calls the library and prints a summary. main.cpp dispatches.
// Errors and exit codes follow loom/cli.h: a subcommand returns kExitOk, or kExitFailed when verify
// found a bad shard, and throws UsageError or loom::Error otherwise.
#pragma once

#include <string>
#include <vector>

#include "loom/cli.h"

namespace loom::packer {

using Args = std::vector<std::string>;
int cmd_verify(const Args& args);
int cmd_stats(const Args& args);
int cmd_head(const Args& args);
int cmd_merge(const Args& args);
int cmd_split(const Args& args);
int cmd_convert(const Args& args);
int cmd_pack(const Args& args);

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Args&);
};
const std::vector<Command>& commands();

}  // namespace loom::packer
