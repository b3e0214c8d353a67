// loom-dedup: exact and near-duplicate removal and decontamination of token shards
// (docs/DEDUP.md). Exit codes: loom/cli.h.
#include <string>
#include <vector>

#include "loom/cli.h"
#include "loom/dedup/cli.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return loom::run_main("loom-dedup: ", [&] { return loom::dedup::dedup_main(args); });
}
