// loom-train's state.json reader (TrainState::from_json, on every resume) on arbitrary bytes. A state
// that reads, and whose RNG text decodes (as a resume decodes it), must write back (to_json) as
// JSON that reads to the same state.
#include "fuzz_util.h"
#include "train_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_only_loom_errors([&] {
    const loom::TrainState s = loom::TrainState::from_json(std::string(reinterpret_cast<const char*>(data), size),
                                                           "state.json");
    (void)loom::from_hex(s.cpu_rng_state_hex, "state.json: rng.cpu");
    const std::string once = s.to_json();
    std::string twice;
    try {
      twice = loom::TrainState::from_json(once, "to_json").to_json();
    } catch (const loom::Error& e) {
      LOOM_ASSERT(false, "to_json's output does not read back: ", e.what(), "\n", once);
    }
    LOOM_ASSERT(twice == once, "to_json is not a fixed point:\n", once, "\n", twice);
  });
  return 0;
}
