// loom-tokenize's decompressing inputs (gzip through zlib, zstd) on arbitrary bytes: the first byte
// picks .gz or .zst, the rest is the file. A truncated or corrupt stream must be a loom::Error.
#include <vector>

#include "fuzz_util.h"
#include "loom/tokenize/byte_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string path = loom::fuzz::scratch() / ((data[0] & 1) ? "in.txt.zst" : "in.txt.gz");
  loom::fuzz::put_file(path, {reinterpret_cast<const char*>(data) + 1, size - 1});
  loom::fuzz::expect_only_loom_errors([&] {
    auto src = loom::tokenize::open_byte_source(path);
    std::vector<char> buf(4096);
    uint64_t total = 0;
    while (size_t n = src->read(buf.data(), buf.size())) {
      total += n;
      // A decompression bomb is not a crash; stop reading where a seed never goes.
      if (total > (64u << 20)) break;
    }
  });
  return 0;
}
