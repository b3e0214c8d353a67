// loom's own SentencePiece .model reader (loom-train's tokenizer checks, HF export, decode) on
// arbitrary bytes. A model that reads is used as loom uses one: the exact encoder built from it
// (which may refuse the model with a loom::Error), a short text encoded, and its ids decoded.
#include <vector>

#include "fuzz_util.h"
#include "loom/spm_encoder.h"
#include "loom/spm_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = loom::fuzz::scratch() / "m.model";
  loom::fuzz::put_file(path, {reinterpret_cast<const char*>(data), size});
  loom::fuzz::expect_only_loom_errors([&] {
    loom::spm::SpmModel m = loom::spm::read_spm_model(path);
    std::vector<int64_t> all;
    for (int i = 0; i < m.size() && i < 4096; ++i) all.push_back(i);
    (void)loom::spm::decode(m, all);
    loom::spm::SpmEncoder enc(std::move(m));
    const std::vector<int64_t> ids = enc.encode("Hello  world, \xe5\x90\xbe\xe8\xbc\xa9\xe3\x81\xaf cat.\t\xef\xbc\xa1 1/2");
    for (int64_t id : ids) LOOM_ASSERT(id >= 0 && id < enc.model().size(), "id ", id, " of ", enc.model().size());
    (void)loom::spm::decode(enc.model(), ids);
  });
  return 0;
}
