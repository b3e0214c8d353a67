// Figures for people (loom/progress.h), numbers for files (json_number), the log prefix, and the two
// kinds of check: what the user sees of each.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "loom/error.h"
#include "loom/json_text.h"
#include "loom/log.h"
#include "loom/options.h"
#include "loom/progress.h"
#include "test_util.h"

using namespace loom;

namespace {

// What `fn` writes to stderr (fd 2), through a file.
template <typename Fn>
std::string stderr_of(const test::TempDir& dir, Fn fn) {
  const std::string path = dir / "stderr.txt";
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(saved >= 0);
  REQUIRE(file >= 0);
  ::dup2(file, STDERR_FILENO);
  ::close(file);
  fn();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  return test::read_all(path);
}

}  // namespace

TEST_CASE("figures for people: counts with separators, a few significant digits, one percentage") {
  CHECK(format_count(uint64_t{0}) == "0");
  CHECK(format_count(uint64_t{999}) == "999");
  CHECK(format_count(uint64_t{1000}) == "1,000");
  CHECK(format_count(uint64_t{1234567}) == "1,234,567");
  CHECK(format_count(int64_t{-1234567}) == "-1,234,567");
  CHECK(format_number(3.41234567) == "3.412");
  CHECK(format_number(0.0001) == "0.0001");
  CHECK(format_number(2.5e-5) == "2.5e-05");
  CHECK(format_number(0.1 + 0.2) == "0.3");
  CHECK(format_number(12345.6) == "12,346");
  CHECK(format_number(12345.6, 3) == "12,346");
  CHECK(format_number(1.0 / 0.0) == "inf");
  CHECK(format_number(std::nan("")) == "nan");
  // Padding and every other share: 3 significant digits, the same everywhere.
  CHECK(format_percent(44.0425, 100000) == "0.044%");
  CHECK(format_percent(1, 8) == "12.5%");
  CHECK(format_percent(5, 5) == "100%");
  CHECK(format_percent(3, 0) == "0%");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1234567) == "1.23 MB");
}

TEST_CASE("json_number: the shortest text that reads back as the same double") {
  CHECK(json_number(0.1) == "0.1");
  CHECK(json_number(0.9) == "0.9");  // not 0.90000000000000002
  CHECK(json_number(1e-5) == "1e-05");
  CHECK(json_number(0.1 + 0.2) == "0.30000000000000004");  // 17 digits only where the value needs them
  CHECK(json_number(1.0 / 0.0) == "null");
  // Deterministic bit patterns over the whole finite range: each text parses back bit for bit.
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double v;
    std::memcpy(&v, &x, sizeof v);
    if (!std::isfinite(v)) continue;
    const std::string t = json_number(v);
    INFO(t);
    const double back = std::strtod(t.c_str(), nullptr);
    REQUIRE(std::memcmp(&back, &v, sizeof v) == 0);
    char g17[40];
    std::snprintf(g17, sizeof g17, "%.17g", v);
    REQUIRE(t.size() <= std::strlen(g17) + 1);  // never longer than 17 digits (+1: to_chars' "e+NN" vs "e+N")
  }
}

TEST_CASE("a failed CHECK is the user's message alone, an ASSERT carries the source location") {
  const int zero = 0;
  CHECK_THROWS_WITH([&] { LOOM_CHECK(zero > 0, "data.seq_len must be > 0, got ", zero); }(),
                    "data.seq_len must be > 0, got 0");
  CHECK_THROWS_WITH([&] { LOOM_CHECK(zero > 0, ""); }(), "check failed: zero > 0");
  CHECK_THROWS_WITH([&] { LOOM_ASSERT(zero > 0, "two"); }(),
                    Catch::Contains("[format_test.cpp:") && Catch::Contains("a bug in loom"));
}

TEST_CASE("the log prefix names the rank only in a job of several ranks") {
  test::TempDir dir("log_prefix");
  const std::string one = stderr_of(dir, [] { log::info("hello"); });
  CHECK_THAT(one, Catch::Matches(R"(\[loom \d\d:\d\d:\d\d\] INFO hello\n)"));
  const std::string two = stderr_of(dir, [] {
    log::set_world(2);
    log::info("hello");
    log::set_world(1);
  });
  CHECK_THAT(two, Catch::Matches(R"(\[loom \d\d:\d\d:\d\d rank 0\] INFO hello\n)"));
  // A warning every rank would print alike: rank 0 prints it for the job.
  const std::string other = stderr_of(dir, [] {
    log::set_rank(1);
    log::job_warn("same everywhere");
    log::warn("this rank's own");
    log::set_rank(0);
  });
  CHECK_THAT(other, !Catch::Contains("same everywhere") && Catch::Contains("this rank's own"));
}

TEST_CASE("options: defaults in --help and the changed keys in their shortest text") {
  double beta = 0, eps = 0;
  OptionParser p("tool", "tool [options]");
  p.options().add_options()("adam.beta1", value_with_default(&beta, 0.9), "beta1")(
      "adam.eps", value_with_default(&eps, 1e-8), "eps")("job.name", po::value<std::string>()->default_value("run"), "name");
  CHECK_THAT(p.help(), Catch::Contains("(=0.9)") && Catch::Contains("(=1e-08)") && !Catch::Contains("0000000"));
  REQUIRE(p.parse({"--adam.eps=0.001", "--job.name=run"}));
  CHECK(p.resolved_ini() == "[adam]\nbeta1 = 0.9\neps = 0.001\n[job]\nname = run\n");
  CHECK(p.changed_ini() == "[adam]\neps = 0.001\n");  // job.name was given, but as its default
}

TEST_CASE("options: a bool option's default in --help reads true/false, as INI files write it") {
  bool on = false, off = true;
  OptionParser p("tool", "tool [options]");
  p.options().add_options()("job.on", value_with_default(&on, true), "on")(
      "job.off", value_with_default(&off, false), "off");
  CHECK_THAT(p.help(), Catch::Contains("--job.on arg (=true)") && Catch::Contains("--job.off arg (=false)") &&
                           !Catch::Contains("(=1)") && !Catch::Contains("(=0)"));
  REQUIRE(p.parse({"--job.off=true"}));
  CHECK((on && off));
  CHECK(p.resolved_ini() == "[job]\noff = true\non = true\n");
  CHECK(p.changed_ini() == "[job]\noff = true\n");
}
