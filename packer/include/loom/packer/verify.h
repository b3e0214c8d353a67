// `loom-pack verify`: checks shards of any kind (loom, packed, InternLM; told apart by content)
// with the one reader of each format, never writing anything. Without --deep: what the readers
// check on open (magic, version, header, dtype, sizes, offsets; O(documents)). With --deep also
// every header field against the data (loom shards: bos/eos ids, flags, reserved bytes), every
// token id < vocab and the .bin checksum (one sequential mmap pass), and for InternLM shards every
// line parsed against its .meta count.
#pragma once

#include <cstdint>
#include <string>

#include "loom/progress.h"

namespace loom::packer {

struct VerifyOptions {
  bool deep = false;
  // When > 0 (deep only) every id must be below it, in every kind of shard: the only vocab check
  // of InternLM shards (they record none), on top of the header's for loom and packed shards.
  uint32_t vocab_size = 0;
};

struct VerifyResult {
  std::string path;
  std::string kind;      // "loom", "packed", "internlm"
  bool ok = false;
  std::string error;     // the reader's message when !ok
  uint64_t documents = 0;  // packs for packed shards
  uint64_t tokens = 0;
};

// Never throws loom::Error: a failure is returned in the result.
VerifyResult verify_shard(const std::string& bin_path, const VerifyOptions& options, Progress* progress);

// Bytes a deep verify of this shard reads (for the progress total); 0 if it cannot be stat'ed.
uint64_t verify_bytes(const std::string& bin_path);

}  // namespace loom::packer
