// loom-tokenize: text (txt/json/jsonl, plain/.gz/.zst) into SentencePiece token shards, and
// `loom-tokenize train-spm`. Exit codes: loom/cli.h.
#include <string>
#include <vector>

#include "loom/cli.h"
#include "loom/tokenize/cli.h"

int main(int argc, char** argv) {
  using namespace loom::tokenize;
  const std::vector<std::string> args(argv + 1, argv + argc);
  return loom::run_main("", [&] {
    if (!args.empty() && args[0] == "train-spm") return train_spm_main({args.begin() + 1, args.end()});
    return tokenize_main(args);
  });
}
