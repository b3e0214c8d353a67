// loom's packed shard reader (loom-train's data, loom-pack verify) on an arbitrary .meta and .bin
// (fuzz_util.h's split2: .meta first; bit 31 of its length recomputes both checksums). A shard that opens is read as the trainer does: every pack
// and its segments, then verify_deep.
#include <cstddef>
#include <vector>

#include "fuzz_util.h"
#include "loom/packed_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::TwoFiles in = loom::fuzz::split2(data, size);
  std::string& meta = in.first;
  if (in.fix_checksums && meta.size() >= sizeof(loom::PackedHeader)) {
    loom::fuzz::fix_checksum(meta, offsetof(loom::PackedHeader, index_xxh64), meta, sizeof(loom::PackedHeader),
                             UINT64_MAX);
    loom::fuzz::fix_checksum(meta, offsetof(loom::PackedHeader, bin_xxh64), in.second, 0, UINT64_MAX);
  }
  const std::string path = loom::fuzz::scratch() / "p.bin";
  loom::fuzz::put_file(path, in.second);
  loom::fuzz::put_file(loom::meta_path_for(path), meta);
  loom::fuzz::expect_only_loom_errors([&] {
    loom::PackedReader r(path);
    std::vector<uint32_t> ids;
    for (uint64_t p = 0; p < r.num_packs() && p < 4096; ++p) {
      r.read_pack(p, ids);
      LOOM_ASSERT(ids.size() == r.seq_len(), "pack ", p, ": ", ids.size(), " ids");
      for (const loom::PackedSegment* s = r.segments_begin(p); s != r.segments_end(p); ++s)
        LOOM_ASSERT(uint64_t{s->start} + s->length <= r.seq_len(), "pack ", p, ": segment past the pack");
    }
    r.verify_deep();
  });
  return 0;
}
