// loom-dedup's command line: parses the options (--help lists them), runs the stage, returns an
// exit code of loom/cli.h (errors are thrown; main() turns them into codes).
#pragma once

#include <string>
#include <vector>

namespace loom::dedup {

int dedup_main(const std::vector<std::string>& args);

}  // namespace loom::dedup
