// loom-tokenize: text (txt/json/jsonl, plain/.gz/.zst) into SentencePiece token shards, and
// `loom-tokenize train-spm`. Exit codes: 0 ok, 1 bad input/environment, 2 bad usage, 3 internal error.
#include <exception>
#include <string>
#include <vector>

#include "loom/log.h"
#include "loom/tokenize/cli.h"

int main(int argc, char** argv) {
  using namespace loom::tokenize;
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (!args.empty() && args[0] == "train-spm") return train_spm_main({args.begin() + 1, args.end()});
    return tokenize_main(args);
  } catch (const UsageError& e) {
    loom::log::error(e.what());
    return kExitUsage;
  } catch (const loom::Error& e) {
    loom::log::error(e.what());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    loom::log::error("out of memory");
    return kExitBadInput;
  } catch (const std::exception& e) {
    loom::log::error(e.what());
    return kExitInternal;
  }
}
