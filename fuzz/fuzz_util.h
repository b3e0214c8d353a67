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
#include <vector>

#include "loom/error.h"
#include "loom/hash.h"

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

// Two files from one input: a little-endian u32 n, then n & 0x7fffffff bytes of the first file
// (fewer when the input ends), then the second file. make_corpus.py writes seeds in this layout.
// Bit 31 of n asks the target to recompute the checksums its format records (fix_checksum), so
// that mutations get past them to the checks behind.
struct TwoFiles {
  std::string first, second;
  bool fix_checksums = false;
};
inline TwoFiles split2(const uint8_t* data, size_t size) {
  TwoFiles out;
  if (size < 4) return out;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  out.fix_checksums = (n >> 31) != 0;
  n &= 0x7fffffffu;
  const size_t first = n < size - 4 ? n : size - 4;
  const char* p = reinterpret_cast<const char*>(data) + 4;
  out.first.assign(p, first);
  out.second.assign(p + first, size - 4 - first);
  return out;
}

// Writes XXH64 of bytes [begin, begin + n) of `of` (clipped to its size) into meta at field_off,
// when both fit: how a .meta records the checksum of its index or of its .bin.
inline void fix_checksum(std::string& meta, size_t field_off, const std::string& of, size_t begin, uint64_t n) {
  if (meta.size() < field_off + 8 || begin > of.size()) return;
  const uint64_t len = n < of.size() - begin ? n : of.size() - begin;
  const uint64_t h = loom::xxh64(of.data() + begin, len);
  std::memcpy(&meta[field_off], &h, 8);
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

// The walk of a token reader's fuzzer: open path with Reader, read its first documents (up to 4096)
// and run its deep check (with verify_args), swallowing loom::Error.
template <typename Reader, typename... VerifyArgs>
void read_every_doc(const std::string& path, VerifyArgs... verify_args) {
  expect_only_loom_errors([&] {
    Reader r(path);
    std::vector<uint32_t> ids;
    for (uint64_t i = 0; i < r.num_docs() && i < 4096; ++i) {
      ids.clear();
      r.read_doc(i, ids);
    }
    r.verify_deep(verify_args...);
  });
}

}  // namespace loom::fuzz
