// loom-pack SUBCOMMAND [options] ...: dispatches to the subcommands of packer/src/cmd_*.cpp and
// turns errors into the exit codes documented in loom/packer/commands.h.
#include <cstring>
#include <exception>
#include <iostream>

#include "loom/log.h"
#include "loom/packer/commands.h"

namespace {
void usage(std::ostream& os) {
  os << "Usage: loom-pack SUBCOMMAND [options] ...   (loom-pack SUBCOMMAND --help for its options)\n\n";
  for (const auto& c : loom::packer::commands()) os << "  " << c.name << std::string(10 - std::strlen(c.name), ' ') << c.summary << "\n";
  os << "\nExit codes: 0 ok, 1 failed (verify found a bad shard, or an error), 2 bad usage, 3 internal error\n";
}
}  // namespace

int main(int argc, char** argv) {
  using namespace loom::packer;
  if (argc < 2) {
    usage(std::cerr);
    return kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(std::cout);
    return kExitOk;
  }
  try {
    for (const auto& c : commands())
      if (name == c.name) return c.run(Args(argv + 2, argv + argc));
    loom::log::error("loom-pack: unknown subcommand '", name, "'");
    usage(std::cerr);
    return kExitUsage;
  } catch (const UsageError& e) {
    loom::log::error("loom-pack ", name, ": ", e.what());
    return kExitUsage;
  } catch (const loom::Error& e) {
    loom::log::error("loom-pack ", name, ": ", e.what());
    return kExitFailed;
  } catch (const loom::InternalError& e) {
    loom::log::error("loom-pack ", name, ": ", e.what());
    return kExitInternal;
  } catch (const std::exception& e) {
    loom::log::error("loom-pack ", name, ": ", e.what());
    return kExitFailed;
  }
}
