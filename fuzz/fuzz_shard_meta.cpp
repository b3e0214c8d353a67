// loom's token shard reader (loom-pack verify, merge, split, convert, pack) on an arbitrary .meta
// and .bin (fuzz_util.h's split2: .meta first). A shard that opens is read as every consumer does:
// verify_deep, then each document.
#include <vector>

#include "fuzz_util.h"
#include "loom/shard_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [meta, bin] = loom::fuzz::split2(data, size);
  const std::string path = loom::fuzz::scratch() / "s.bin";
  loom::fuzz::put_file(path, bin);
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
