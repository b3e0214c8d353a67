// Helpers shared by the loom-tokenize tests: running the tool and the Python reference.
#pragma once

#include <string>

#include "test_util.h"

namespace loom::test {

inline std::string corpus(const std::string& name) { return test_data_dir() + "/" + name; }
inline std::string sample(const std::string& name) { return source_dir() + "/data_samples/" + name; }
inline std::string internlm_model() { return corpus("internlm_v7.model"); }
inline std::string reference_py() { return quote(python()) + " " + quote(source_dir() + "/tests/tokenize/reference.py"); }

#ifdef LOOM_TOKENIZE_BIN
// Runs loom-tokenize with args (already quoted as needed).
inline RunResult tokenize(const std::string& args) { return run(quote(LOOM_TOKENIZE_BIN) + " " + args); }
#endif

// Runs `python3 -c CODE`; the code is passed through a file so quoting stays simple.
inline RunResult python_code(const TempDir& dir, const std::string& code) {
  write_all(dir / "snippet.py", code);
  return run(quote(python()) + " " + quote(dir / "snippet.py"));
}

// Files in a folder (names only, sorted), for "nothing was left behind" checks.
inline std::string list_dir(const std::string& dir) { return run("(ls -A " + quote(dir) + " 2>/dev/null)").output; }

}  // namespace loom::test
