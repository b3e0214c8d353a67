// InternLM's token shard reader (loom-pack verify and convert) on an arbitrary .meta (.npy) and
// .bin (fuzz_util.h's split2: .meta first): open, each document, then verify_deep.
#include "fuzz_util.h"
#include "loom/internlm_format.h"
#include "loom/shard_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const loom::fuzz::TwoFiles in = loom::fuzz::split2(data, size);  // InternLM records no checksum
  const std::string path = loom::fuzz::scratch() / "i.bin";
  loom::fuzz::put_file(path, in.second);
  loom::fuzz::put_file(loom::meta_path_for(path), in.first);
  loom::fuzz::read_every_doc<loom::InternlmReader>(path, 1000);
  return 0;
}
