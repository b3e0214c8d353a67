// Command-line front end of loom-tokenize: the options of each subcommand, parsed with
// loom::OptionParser into the typed option structs, and the printed summaries. main() stays thin.
// Errors and exit codes follow loom/cli.h (docs/TOKENIZE.md).
#pragma once

#include <string>
#include <vector>

#include "loom/cli.h"

namespace loom::tokenize {

// Runs `loom-tokenize ARGS...` (args without the program name); returns kExitOk (also for --help);
// throws on failure: UsageError for bad usage, loom::Error for bad input.
int tokenize_main(const std::vector<std::string>& args);
int train_spm_main(const std::vector<std::string>& args);

}  // namespace loom::tokenize
