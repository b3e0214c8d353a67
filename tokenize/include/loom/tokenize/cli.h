// Command-line front end of loom-tokenize: the options of each subcommand, parsed with
// loom::OptionParser into the typed option structs, and the printed summaries. main() stays thin.
//
// Exit codes (docs/TOKENIZE.md): 0 ok, 1 bad input or environment (loom::Error),
// 2 bad usage (UsageError), 3 internal error (a bug in loom).
#pragma once

#include <string>
#include <vector>

#include "loom/error.h"

namespace loom::tokenize {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;

// Bad command-line usage: unknown option, missing required option, a value out of its set.
class UsageError : public Error {
 public:
  using Error::Error;
};

// Runs `loom-tokenize ARGS...` (args without the program name); returns the exit code for success
// or --help; throws on failure.
int tokenize_main(const std::vector<std::string>& args);
int train_spm_main(const std::vector<std::string>& args);

}  // namespace loom::tokenize
