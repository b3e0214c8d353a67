// Catch2 checks over test_util.h's results, shared by the end-to-end tests of the tools.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "test_util.h"

namespace loom::test {

// The command exited 0; its output is shown when it did not.
inline void require_ok(const RunResult& r) {
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}

// Two files hold the same bytes, and not none.
inline void require_same_file(const std::string& a, const std::string& b) {
  INFO(a << " vs " << b);
  const std::string x = read_all(a), y = read_all(b);
  REQUIRE(!x.empty());
  REQUIRE(x == y);
}

}  // namespace loom::test
