// loom-train's checkpoint validation (--resume, --init-from) with an arbitrary manifest.json in a
// folder that holds the files a checkpoint has (small, fixed contents; make_corpus.sh's seeds list
// them with their true sizes and checksums).
#include "checkpoint.h"
#include "fuzz_util.h"

namespace {
const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const std::string d = loom::fuzz::scratch() / "step_3";
    loom::sys::make_dirs(d);
    loom::fuzz::put_file(d + "/model.safetensors", "model");
    loom::fuzz::put_file(d + "/optimizer.safetensors", "optimizer");
    loom::fuzz::put_file(d + "/state.json", "{}");
    loom::fuzz::put_file(d + "/config.ini", "");
    return d;
  }();
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = checkpoint_dir();
  loom::fuzz::put_file(dir + "/manifest.json", {reinterpret_cast<const char*>(data), size});
  loom::fuzz::expect_only_loom_errors([&] {
    const int64_t step = loom::validate_checkpoint_named(dir);
    LOOM_ASSERT(step == 3, "a checkpoint named step_3 validated with step ", step);
  });
  return 0;
}
