// What the fuzz targets share: a scratch folder for readers that take a path (one per process,
// removed at exit), the split of one input into two files, and the rule
// for exceptions. A reader under fuzz may throw loom::Error (bad input, the expected outcome) and
// nothing else: an InternalError, a std::exception of another kind, a crash, a leak, undefined
// behaviour or a hang is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "loom/error.h"

namespace loom::fuzz {

// A folder under $TMPDIR (else /dev/shm, memory, where there is one; else /tmp) that lives as long
// as the process.
class ScratchDir {
 public:
  ScratchDir() {
    const char* t = std::getenv("TMPDIR");
    const std::string base = t && *t ? t : access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/loom-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("loom fuzz: mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    const std::string cmd = "rm -rf '" + path_ + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "loom fuzz: could not remove %s\n", path_.c_str());
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline ScratchDir& scratch() {
  static ScratchDir dir;
  return dir;
}

// Writes bytes to path (replacing it), aborting on an I/O error: the harness, not the reader, failed.
inline void put_file(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (bytes.size() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

// Two files from one input: a little-endian u32 n, then n bytes of the first file (fewer when the
// input ends), then the second file. make_corpus.sh writes seeds in this layout.
inline std::pair<std::string_view, std::string_view> split2(const uint8_t* data, size_t size) {
  if (size < 4) return {{}, {}};
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  const size_t first = n < size - 4 ? n : size - 4;
  const char* p = reinterpret_cast<const char*>(data) + 4;
  return {{p, first}, {p + first, size - 4 - first}};
}

// Runs body; swallows loom::Error (the reader refused the input, as it should). Anything else
// escapes to libFuzzer, which reports it as a crash (an uncaught exception aborts).
template <typename F>
void expect_only_loom_errors(F&& body) {
  try {
    body();
  } catch (const loom::Error&) {  // not InternalError: a broken invariant is a bug whatever the input
  }
}

}  // namespace loom::fuzz
