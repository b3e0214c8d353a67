// Packs -> loom::Batch (trainer/core/batch.h): the tensors the model and the loss read.
//
// Per row (one pack of T tokens) and per segment [s, s+len) of the pack:
//   tokens     the pack's ids as stored (padding holds the shard's pad_id)
//   labels     labels[s+i] = tokens[s+i+1] for i < len-1; kIgnoreIndex at s+len-1 (the next token
//              is another document, or this document's continuation in another pack) and on padding
//   positions  0, 1, ..., len-1 (restarting in every segment); 0 on padding
//   segments   the segment's index within its row (0, 1, ...); -1 on padding
// cu_seqlens runs over the flattened B*T tokens, row by row: each segment, and each maximal run of
// padding inside a row, is one entry; max_seqlen is the longest of them.
// A row without a pack (PackRef::shard == nullptr, used to even out validation tails) is all padding.
#pragma once

#include <cstdint>
#include <vector>

#include "batch.h"
#include "loom/packed_format.h"

namespace loom {

struct PackRef {
  const PackedReader* shard = nullptr;  // nullptr: an all-padding row
  uint64_t pack = 0;                    // within shard
  int64_t dataset = 0;                  // dataset id of the row (Batch::dataset_ids), for per-dataset metrics
};

class BatchBuilder {
 public:
  BatchBuilder(int64_t seq_len, uint32_t pad_id) : seq_len_(seq_len), pad_id_(pad_id) {}
  // One row per ref. Throws loom::Error naming the shard, pack and byte offset of an id >= vocab.
  Batch build(const std::vector<PackRef>& rows) const;

 private:
  int64_t seq_len_;
  uint32_t pad_id_;
};

}  // namespace loom
