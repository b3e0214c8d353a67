// loom-train's safetensors reader (checkpoints, --init-from-hf) on arbitrary bytes: a file that
// opens gives every tensor it names.
#include "fuzz_util.h"
#include "safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = loom::fuzz::scratch() / "t.safetensors";
  loom::fuzz::put_file(path, {reinterpret_cast<const char*>(data), size});
  loom::fuzz::expect_only_loom_errors([&] {
    loom::safetensors::Reader r(path);
    for (const std::string& name : r.names()) {
      const torch::Tensor t = r.get(name);
      LOOM_ASSERT(t.defined() && t.is_contiguous(), "tensor ", name);
    }
  });
  return 0;
}
