#include <catch2/catch.hpp>

#include "loom/cli.h"
#include "loom/error.h"
#include "loom/options.h"
#include "test_util.h"

using namespace loom;

namespace {
OptionParser make_parser() {
  OptionParser p("tool", "tool [options] INPUT...");
  p.options().add_options()("data.seq_len", po::value<int>()->default_value(2048), "sequence length")(
      "adam.lr", po::value<double>()->default_value(1e-4), "learning rate")(
      "job.name", po::value<std::string>()->default_value("run"), "name")(
      "inputs", po::value<std::vector<std::string>>()->default_value({}, ""), "inputs");
  p.positional("inputs");
  return p;
}
}  // namespace

TEST_CASE("INI file values apply and command-line overrides win") {
  test::TempDir dir("opts");
  test::write_all(dir / "c.ini", "[data]\nseq_len = 4096\n[adam]\nlr = 0.5\n");
  OptionParser p = make_parser();
  REQUIRE(p.parse({"--config", dir / "c.ini", "--adam.lr=0.25", "x.txt", "y.txt"}));
  CHECK(p.get<int>("data.seq_len") == 4096);
  CHECK(p.get<double>("adam.lr") == 0.25);
  CHECK(p.get<std::vector<std::string>>("inputs") == std::vector<std::string>{"x.txt", "y.txt"});
  CHECK(p.resolved_ini() == "[adam]\nlr = 0.25\n[data]\nseq_len = 4096\n[job]\nname = run\n");
}

TEST_CASE("unknown keys are rejected on the command line and in the file") {
  test::TempDir dir("opts");
  OptionParser a = make_parser();
  CHECK_THROWS_WITH(a.parse({"--data.seq_lenn=3"}), Catch::Contains("unrecognised option '--data.seq_lenn=3'"));
  test::write_all(dir / "bad.ini", "[data]\nseqlen = 1\n");
  OptionParser b = make_parser();
  CHECK_THROWS_WITH(b.parse({"--config", dir / "bad.ini"}), Catch::Contains("data.seqlen"));
}

TEST_CASE("--help returns false") {
  OptionParser p = make_parser();
  CHECK_FALSE(p.parse({"--help"}));
}

TEST_CASE("numeric options read as text reject a sign, junk and values outside their range") {
  CHECK(parse_uint("n", "0", 0, 10) == 0);
  CHECK(parse_uint("n", "18446744073709551615", 0, UINT64_MAX) == UINT64_MAX);
  CHECK(parse_int("n", "-5", -10, 10) == -5);
  CHECK(parse_double("f", "0.25", 0, 1) == 0.25);
  // Boost would read "-1" into an unsigned as 2^64-1; here it is refused, as is anything not a number.
  for (const char* bad : {"-1", "", " 1", "1 ", "1.5", "0x10", "11", "18446744073709551616", "ten"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_uint("threads", bad, 0, 10), UsageError);
  }
  CHECK_THROWS_WITH(parse_uint("threads", "-1", 1, 1024), "--threads: '-1' is not an integer in [1, 1024]");
  CHECK_THROWS_WITH(parse_int("valid-docs", "-1", 0, 5), "--valid-docs: '-1' is not an integer in [0, 5]");
  for (const char* bad : {"nan", "inf", "1.5", "-0.1", "0.5x", ""}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_double("valid-fraction", bad, 0, 1), UsageError);
  }
  // Through the parser: declared as text, the range checked when read.
  OptionParser p("tool", "tool");
  p.options().add_options()("threads", po::value<std::string>()->default_value("4"), "threads");
  REQUIRE(p.parse(std::vector<std::string>{"--threads", "-1"}));
  CHECK_THROWS_WITH(p.get_uint("threads", 1, 1024), "--threads: '-1' is not an integer in [1, 1024]");
}
