// loom-dedup: exact and near-duplicate removal and decontamination of token shards
// (docs/DEDUP.md). Exit codes: loom/cli.h.
#include <iostream>
#include <string>
#include <vector>

#include "loom/build_info.h"
#include "loom/cli.h"
#include "loom/dedup/cli.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (loom::wants_version(args)) {
    std::cout << loom::version_text("loom-dedup");
    return loom::kExitOk;
  }
  return loom::run_main("loom-dedup: ", [&] { return loom::dedup::dedup_main(args); });
}
