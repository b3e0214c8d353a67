// loom-dedup's evaluation-file reader (read_eval_items: the benchmark texts that --eval names, as
// .txt, .json or .jsonl) on an arbitrary file. The input's first byte picks the file's extension
// (and so its format), its second the key (text, or one a record rarely has), the rest is the
// file. Every item's name and text are read back as the decontamination stage reads them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "loom/dedup/eval_set.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const char* const kExtensions[] = {".txt", ".jsonl", ".json", ".csv"};
  const std::string path = loom::fuzz::scratch() / (std::string("eval") + kExtensions[data[0] % 4]);
  const std::string key = (data[1] & 1) != 0 ? "question" : "text";
  loom::fuzz::put_file(path, std::string(reinterpret_cast<const char*>(data) + 2, size - 2));
  loom::fuzz::expect_only_loom_errors([&] {
    volatile size_t sink = 0;
    for (const auto& item : loom::dedup::read_eval_items(path, key)) sink = sink + item.name.size() + item.text.size();
  });
  return 0;
}
