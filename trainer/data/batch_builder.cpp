#include "batch_builder.h"

#include <algorithm>

#include "loom/error.h"

namespace loom {

Batch BatchBuilder::build(const std::vector<PackRef>& rows) const {
  const int64_t B = static_cast<int64_t>(rows.size()), T = seq_len_;
  LOOM_ASSERT(B > 0, "a batch of no rows");
  Batch b;
  b.tokens = torch::full({B, T}, static_cast<int64_t>(pad_id_), torch::kInt64);
  b.labels = torch::full({B, T}, kIgnoreIndex, torch::kInt64);
  b.positions = torch::zeros({B, T}, torch::kInt64);
  b.segments = torch::full({B, T}, -1, torch::kInt32);
  b.dataset_ids = torch::zeros({B}, torch::kInt64);
  int64_t* tok = b.tokens.data_ptr<int64_t>();
  int64_t* lab = b.labels.data_ptr<int64_t>();
  int64_t* pos = b.positions.data_ptr<int64_t>();
  int32_t* seg = b.segments.data_ptr<int32_t>();
  int64_t* ds = b.dataset_ids.data_ptr<int64_t>();

  std::vector<int32_t> cu{0};
  int64_t loss_tokens = 0, max_len = 0;
  auto add_run = [&](int64_t len) {
    cu.push_back(cu.back() + static_cast<int32_t>(len));
    max_len = std::max(max_len, len);
  };
  for (int64_t r = 0; r < B; ++r) {
    const PackRef& ref = rows[static_cast<size_t>(r)];
    const int64_t row = r * T;
    ds[r] = ref.dataset;
    if (!ref.shard) {
      add_run(T);
      continue;
    }
    const PackedReader& sh = *ref.shard;
    LOOM_ASSERT(static_cast<int64_t>(sh.seq_len()) == T && ref.pack < sh.num_packs(), "pack ", ref.pack, " of ",
                sh.bin_path(), " does not fit a batch of seq_len ", T);
    const uint8_t* bytes = sh.pack_bytes(ref.pack);
    const uint32_t vocab = sh.header().vocab_size;
    for (int64_t t = 0; t < T; ++t) {
      const uint32_t id = sh.dtype_bytes() == 2 ? reinterpret_cast<const uint16_t*>(bytes)[t]
                                                : reinterpret_cast<const uint32_t*>(bytes)[t];
      if (__builtin_expect(id >= vocab, 0)) {
        const uint64_t at = (ref.pack * sh.seq_len() + static_cast<uint64_t>(t)) * sh.dtype_bytes();
        LOOM_FAIL(sh.bin_path(), ": token id ", id, " >= vocab size ", vocab, " in pack ", ref.pack, " at byte offset ",
                  at, " (run loom-pack verify on it)");
      }
      tok[row + t] = id;
    }
    int64_t covered = 0;  // end of the previous segment: the gap before a segment is a padding run
    int32_t index = 0;
    for (const PackedSegment* s = sh.segments_begin(ref.pack); s != sh.segments_end(ref.pack); ++s, ++index) {
      const int64_t start = s->start, len = s->length;
      if (start > covered) add_run(start - covered);
      for (int64_t i = 0; i < len; ++i) {
        pos[row + start + i] = i;
        seg[row + start + i] = index;
      }
      for (int64_t i = 0; i + 1 < len; ++i) lab[row + start + i] = tok[row + start + i + 1];
      loss_tokens += len - 1;
      add_run(len);
      covered = start + len;
    }
    if (covered < T) add_run(T - covered);
  }
  b.cu_seqlens = torch::tensor(cu, torch::kInt32);
  b.max_seqlen = max_len;
  b.num_loss_tokens = loss_tokens;
  return b;
}

}  // namespace loom
