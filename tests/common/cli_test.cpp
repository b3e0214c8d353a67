// run_main: each kind of exception becomes its code of loom/cli.h's table and exactly one log line.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <new>
#include <stdexcept>

#include "loom/cli.h"
#include "loom/options.h"
#include "test_util.h"

using namespace loom;

namespace {

struct Ran {
  int code;
  std::string log;  // what went to stderr
};

// Runs run_main with stderr sent to a file, so the log line can be read back.
Ran run_captured(const std::function<int()>& body) {
  test::TempDir dir("cli");
  const std::string path = dir / "stderr";
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
  const int code = run_main("tool sub: ", body);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  return {code, test::read_all(path)};
}

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("run_main returns the body's code and maps each exception to the table's code") {
  CHECK(kExitOk == 0);
  CHECK(kExitFailed == 1);
  CHECK(kExitUsage == 2);
  CHECK(kExitInternal == 3);
  CHECK(kExitHang == 4);
  CHECK(std::string(exit_codes_help()) ==
        "Exit codes: 0 ok, 1 bad input or failed check, 2 usage error, 3 internal error, 4 hang (loom-train's watchdog)");

  struct Case {
    const char* what;
    std::function<int()> body;
    int code;
    std::string line;  // the log line's message, after "ERROR "
  };
  const Case cases[] = {
      {"returned ok", [] { return kExitOk; }, 0, ""},
      {"returned failed", [] { return kExitFailed; }, 1, ""},
      {"UsageError", []() -> int { throw UsageError("--x: bad"); }, 2, "tool sub: --x: bad"},
      {"loom::Error", []() -> int { LOOM_FAIL("a.bin: truncated"); }, 1, "tool sub: a.bin: truncated"},
      {"bad_alloc", []() -> int { throw std::bad_alloc(); }, 1, "tool sub: out of memory"},
      {"InternalError", []() -> int { throw InternalError("internal error: x"); }, 3, "tool sub: internal error: x"},
      {"std::exception", []() -> int { throw std::runtime_error("boom"); }, 3, "tool sub: boom"},
      {"not an exception", []() -> int { throw 7; }, 3,
       "tool sub: internal error: an exception that is not a std::exception"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const Ran r = run_captured(c.body);
    CHECK(r.code == c.code);
    if (c.line.empty()) {
      CHECK(r.log.empty());
    } else {
      CHECK(count_lines(r.log) == 1);
      CHECK_THAT(r.log, Catch::EndsWith(" ERROR " + c.line + "\n"));
    }
  }
}

TEST_CASE("OptionParser: option errors are usage errors, and --help ends with the exit codes") {
  OptionParser p("tool", "tool [options]");
  CHECK_THROWS_AS(p.parse({"--no-such-option"}), UsageError);
  OptionParser q("tool", "tool [options]");
  CHECK_THROWS_AS(q.parse({"--config", "/nonexistent/loom.ini"}), UsageError);
  CHECK_THAT(q.help(), Catch::EndsWith(std::string(exit_codes_help()) + "\n"));
}
