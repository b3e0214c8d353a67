// loom's token shard reader (loom-pack verify, merge, split, convert, pack) on an arbitrary .meta
// and .bin (fuzz_util.h's split2: .meta first; bit 31 of its length recomputes both checksums). A shard that opens is read as every consumer does:
// verify_deep, then each document.
#include <cstddef>
#include <vector>

#include "fuzz_util.h"
#include "loom/shard_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::TwoFiles in = loom::fuzz::split2(data, size);
  std::string& meta = in.first;
  if (in.fix_checksums && meta.size() >= sizeof(loom::ShardHeader)) {
    uint64_t num_docs = 0;
    std::memcpy(&num_docs, meta.data() + offsetof(loom::ShardHeader, num_docs), 8);
    const uint64_t offsets_bytes = num_docs < (1ull << 60) ? 8 * (num_docs + 1) : UINT64_MAX;
    loom::fuzz::fix_checksum(meta, offsetof(loom::ShardHeader, offsets_xxh64), meta, sizeof(loom::ShardHeader),
                             offsets_bytes);
    loom::fuzz::fix_checksum(meta, offsetof(loom::ShardHeader, bin_xxh64), in.second, 0, UINT64_MAX);
  }
  const std::string path = loom::fuzz::scratch() / "s.bin";
  loom::fuzz::put_file(path, in.second);
  loom::fuzz::put_file(loom::meta_path_for(path), meta);
  loom::fuzz::expect_only_loom_errors([&] {
    loom::ShardReader r(path);
    std::vector<uint32_t> ids;
    for (uint64_t i = 0; i < r.num_docs() && i < 4096; ++i) {
      ids.clear();
      r.read_doc(i, ids);
      LOOM_ASSERT(ids.size() == r.doc_len(i), "document ", i, ": ", ids.size(), " ids, doc_len ", r.doc_len(i));
    }
    r.verify_deep();
  });
  return 0;
}
