// What this build of loom is, for every tool's --version: the version of project() in the top
// CMakeLists.txt, the source's `git describe` when it was built ("-dirty" with uncommitted changes,
// "unknown" outside a git checkout; common/cmake/build_commit.cmake), and CMake's build type. A tool
// adds lines of its own (loom-train: LibTorch, CUDA, cuDNN, NCCL).
//
// Linked by the executables only (loom_build_info): a new commit relinks them, not every
// library and test.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom {

extern const char* const kBuildCommit;  // generated at build time

const char* build_version();
const char* build_type();

// True when args asks for the version: its first word is --version.
bool wants_version(const std::vector<std::string>& args);

// "TOOL VERSION\ncommit: C\nbuild type: T\n" and then "NAME: VALUE\n" for each extra line.
std::string version_text(const std::string& tool, const std::vector<std::pair<std::string, std::string>>& extra = {});

}  // namespace loom
