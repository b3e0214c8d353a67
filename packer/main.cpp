// loom-pack SUBCOMMAND [options] ...: dispatches to the subcommands of packer/src/cmd_*.cpp; errors
// become the exit codes of loom/cli.h.
#include <cstring>
#include <iostream>

#include "loom/build_info.h"
#include "loom/cli.h"
#include "loom/log.h"
#include "loom/packer/commands.h"

namespace {
void usage(std::ostream& os) {
  os << "Usage: loom-pack SUBCOMMAND [options] ...   (loom-pack SUBCOMMAND --help for its options)\n"
        "       loom-pack --version\n\n";
  for (const auto& c : loom::packer::commands()) os << "  " << c.name << std::string(10 - std::strlen(c.name), ' ') << c.summary << "\n";
  os << "\n" << loom::exit_codes_help() << "\n";
}
}  // namespace

int main(int argc, char** argv) {
  using namespace loom::packer;
  if (argc < 2) {
    usage(std::cerr);
    return loom::kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(std::cout);
    return loom::kExitOk;
  }
  if (name == "--version") {
    std::cout << loom::version_text("loom-pack");
    return loom::kExitOk;
  }
  const Args args(argv + 2, argv + argc);
  for (const auto& c : commands())
    if (name == c.name) return loom::run_main("loom-pack " + name + ": ", [&] { return c.run(args); });
  loom::log::error("loom-pack: unknown subcommand '", name, "'");
  usage(std::cerr);
  return loom::kExitUsage;
}
