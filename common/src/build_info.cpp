#include "loom/build_info.h"

namespace loom {

// Both from CMake (common/CMakeLists.txt): project(VERSION) and CMAKE_BUILD_TYPE.
const char* build_version() { return LOOM_BUILD_VERSION; }
const char* build_type() { return LOOM_BUILD_TYPE; }

bool wants_version(const std::vector<std::string>& args) { return !args.empty() && args[0] == "--version"; }

std::string version_text(const std::string& tool, const std::vector<std::pair<std::string, std::string>>& extra) {
  std::string s = tool + " " + build_version() + "\ncommit: " + kBuildCommit + "\nbuild type: " + build_type() + "\n";
  for (const auto& [name, value] : extra) s += name + ": " + value + "\n";
  return s;
}

}  // namespace loom
