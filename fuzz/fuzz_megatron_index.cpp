// Megatron-LM's indexed dataset reader (loom-pack verify, stats, head and convert) on an arbitrary
// .idx and .bin (fuzz_util.h's split2: .idx first): open, each document, then verify_deep.
#include "fuzz_util.h"
#include "loom/megatron_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const loom::fuzz::TwoFiles in = loom::fuzz::split2(data, size);  // Megatron records no checksum
  const std::string path = loom::fuzz::scratch() / "m.bin";
  loom::fuzz::put_file(path, in.second);
  loom::fuzz::put_file(loom::megatron_idx_path(path), in.first);
  loom::fuzz::read_every_doc<loom::MegatronReader>(path, 1000);
  return 0;
}
