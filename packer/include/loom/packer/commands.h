// The subcommands of loom-pack, one file each (src/cmd_*.cpp): each parses its own options,
// prints the resolved configuration, calls the library and prints a summary. main.cpp dispatches.
//
// Exit codes (main.cpp): 0 success; 1 failure (a shard failed verify, or an error in the input or
// the environment); 2 bad usage (unknown subcommand or option, missing argument); 3 a bug in loom.
#pragma once

#include <string>
#include <vector>

#include "loom/error.h"

namespace loom::packer {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;

// Bad command-line usage (exit code 2).
class UsageError : public Error {
 public:
  using Error::Error;
};

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
