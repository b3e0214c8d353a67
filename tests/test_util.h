// Helpers for tests: scratch folders, running the tools and Python references, reading files.
#pragma once

#include <string>
#include <vector>

namespace loom::test {

// A fresh empty folder under the build tree, removed at destruction unless LOOM_KEEP_TMP is set.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct RunResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};
// Runs a shell command line; captures its output.
RunResult run(const std::string& command);
// Single-quotes s for the shell.
std::string quote(const std::string& s);

std::string read_all(const std::string& path);
void write_all(const std::string& path, const std::string& data);
std::string test_data_dir();  // tests/data of the source tree: real corpora and models (tests/data/README.md)
std::string source_dir();
std::string python();       // Debian's python3

// A listening loopback socket on a port the kernel picks; the kernel completes handshakes even if
// nobody accepts, so a client connects and then waits for an answer that never comes.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener();
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  std::string url(const std::string& path = "/hook") const;
};

}  // namespace loom::test
