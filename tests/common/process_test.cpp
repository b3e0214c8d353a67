// sys::run_process: stdin in, stdout back, exit status, a killed timeout, a child that reads nothing.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "loom/process.h"

using namespace loom;

namespace {
sys::ProcessOptions capture(double timeout_s) {
  sys::ProcessOptions o;
  o.timeout_s = timeout_s;
  o.capture_stdout = true;
  return o;
}
}  // namespace

TEST_CASE("run_process: cat gives back its stdin, larger than a pipe buffer both ways") {
  std::string input;
  for (int i = 0; input.size() < (1 << 20); ++i) input += std::to_string(i) + "\n";
  const sys::ProcessResult r = sys::run_process({"cat"}, input, capture(30));
  CHECK(r.error == "");
  CHECK(r.ok());
  CHECK(r.exit_code == 0);
  CHECK(r.output == input);

  const sys::ProcessResult empty = sys::run_process({"cat"}, "", capture(30));
  CHECK(empty.ok());
  CHECK(empty.output.empty());
}

TEST_CASE("run_process: exit status, signal, and a program that does not exist") {
  const sys::ProcessResult three = sys::run_process({"sh", "-c", "echo out; exit 3"}, "", capture(30));
  CHECK(three.error == "");
  CHECK(three.exit_code == 3);
  CHECK_FALSE(three.ok());
  CHECK(three.output == "out\n");

  const sys::ProcessResult killed = sys::run_process({"sh", "-c", "kill -TERM $$"}, "", capture(30));
  CHECK(killed.error == "");
  CHECK(killed.exit_code == -1);
  CHECK(killed.signal == SIGTERM);

  const sys::ProcessResult missing = sys::run_process({"/nonexistent/loom-no-such-program"}, "", capture(30));
  CHECK(missing.error.find("posix_spawn /nonexistent/loom-no-such-program: No such file or directory") !=
        std::string::npos);
}

TEST_CASE("run_process: a child outliving the timeout is killed, its group with it") {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  // The shell's child holds stdout open: the group kill is what ends the wait for EOF.
  const sys::ProcessResult r = sys::run_process({"sh", "-c", "sleep 30 & wait"}, "", capture(0.3));
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(took < 10);
  CHECK(took >= 0.3);
  CHECK(r.timed_out);
  CHECK(r.signal == SIGKILL);
  CHECK(r.error.find("timed out after 0.3 s") != std::string::npos);

  sys::ProcessOptions inherit;
  inherit.timeout_s = 0.3;
  const sys::ProcessResult plain = sys::run_process({"sleep", "30"}, "", inherit);
  CHECK(plain.timed_out);
}

TEST_CASE("run_process: a child that exits without reading its input is no error, and no SIGPIPE") {
  const sys::ProcessResult r = sys::run_process({"true"}, std::string(4 << 20, 'x'), capture(30));
  CHECK(r.error == "");
  CHECK(r.ok());
}
