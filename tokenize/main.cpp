// loom-tokenize: text (txt/json/jsonl, plain/.gz/.zst) into SentencePiece token shards, and
// `loom-tokenize train-spm`. Exit codes: loom/cli.h.
#include <iostream>
#include <string>
#include <vector>

#include "loom/build_info.h"
#include "loom/cli.h"
#include "loom/tokenize/cli.h"

int main(int argc, char** argv) {
  using namespace loom::tokenize;
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (loom::wants_version(args)) {
    std::cout << loom::version_text("loom-tokenize");
    return loom::kExitOk;
  }
  return loom::run_main("", [&] {
    if (!args.empty() && args[0] == "train-spm") return train_spm_main({args.begin() + 1, args.end()});
    return tokenize_main(args);
  });
}
