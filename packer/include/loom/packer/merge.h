// `loom-pack merge`: one loom shard from many, documents in input order, offsets rewritten.
// Every input is verified deeply (ids, checksums) before anything is written, and inputs of
// different tokenizers, dtypes or bos/eos are refused (ShardSet).
#pragma once

#include <cstdint>
#include <string>

#include "loom/packer/inputs.h"

namespace loom::packer {

struct MergeReport {
  uint64_t inputs = 0, documents = 0, tokens = 0;
};

MergeReport merge_shards(const ShardSet& inputs, const std::string& output_bin);

}  // namespace loom::packer
