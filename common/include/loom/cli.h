// The command-line contract of every loom tool: one table of exit codes, one usage-error type, and
// run_main(), which runs a tool's body and turns what escapes it into that table's code with one
// log line. Libraries throw; only main() returns a code (the watchdog's hang exit is the exception).
//
//   code  meaning                                  comes from
//     0   ok (also --help)                         the body's return value
//     1   bad input or environment, or a failed    loom::Error (LOOM_CHECK, LOOM_FAIL), std::bad_alloc;
//         check (loom-pack verify found a bad      or the body returns kExitFailed
//         shard)
//     2   usage error: unknown option, missing     loom::UsageError (OptionParser throws it)
//         argument, a value outside its set or
//         range
//     3   internal error: a bug in loom            loom::InternalError (LOOM_ASSERT), any other
//                                                  std::exception, anything else thrown
//     4   hang: loom-train's watchdog ended the    kExitHang, from the watchdog's own exit
//         process (no step within the timeout)
#pragma once

#include <functional>
#include <string>

#include "loom/error.h"

namespace loom {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;
inline constexpr int kExitHang = 4;

// The table as one line, for --help texts (OptionParser::help() ends with it).
const char* exit_codes_help();

// Bad command-line usage (exit code 2). An Error too, so code that only knows loom::Error still
// catches it.
class UsageError : public Error {
 public:
  using Error::Error;
};

// Runs body() and returns what it returns. An exception becomes one log::error line, `prefix`
// followed by its message ("out of memory" for std::bad_alloc), and the code of the table above.
// prefix is e.g. "loom-pack merge: ", or empty.
int run_main(const std::string& prefix, const std::function<int()>& body);

}  // namespace loom
