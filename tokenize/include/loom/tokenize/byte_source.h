// Where a reader's bytes come from: a plain file, or one decompressed on the fly (gzip via zlib,
// zstd via libzstd's streaming API). Everything streams through a fixed buffer, so a 100 GB input
// runs in flat memory. The factory picks the variant from the file name's last extension.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace loom::tokenize {

enum class Compression { kNone, kGzip, kZstd };

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to n decompressed bytes into buf; returns 0 only at the end of the stream. Throws
  // loom::Error naming the file on an I/O or decompression error (truncated or corrupt stream).
  virtual size_t read(void* buf, size_t n) = 0;
  // Bytes of the underlying file consumed so far (compressed), for progress.
  virtual uint64_t file_bytes_read() const = 0;
  virtual const std::string& path() const = 0;
};

// ".gz" -> gzip, ".zst"/".zstd" -> zstd, anything else -> none.
Compression compression_for(const std::string& path);
// The name without a compression extension: "a/b.jsonl.gz" -> "a/b.jsonl".
std::string strip_compression_ext(const std::string& path);
std::unique_ptr<ByteSource> open_byte_source(const std::string& path);

}  // namespace loom::tokenize
