#include <catch2/catch.hpp>

#include "loom/cli.h"
#include "loom/error.h"
#include "loom/option_keys.h"
#include "loom/option_table.h"
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
  CHECK_THROWS_WITH(a.parse({"--data.seq_lenn=3"}),
                    "tool: unrecognised option '--data.seq_lenn=3' (did you mean '--data.seq_len'?) (see tool --help)");
  // In the file: FILE:LINE of the key, and the nearest known key.
  test::write_all(dir / "bad.ini", "# a comment\n[data]\n\nseq_len = 8\nseqlen = 1\n");
  OptionParser b = make_parser();
  CHECK_THROWS_WITH(b.parse({"--config", dir / "bad.ini"}),
                    "tool: " + (dir / "bad.ini") + ":5: unknown key 'data.seqlen' (did you mean 'data.seq_len'?) "
                    "(see tool --help)");
  // A key without its section is found by its name; nothing near gives no suggestion.
  test::write_all(dir / "bad2.ini", "seq_len = 1\n");
  OptionParser c = make_parser();
  CHECK_THROWS_WITH(c.parse({"--config", dir / "bad2.ini"}), Catch::Contains(":1: unknown key 'seq_len' (did you mean 'data.seq_len'?)"));
  OptionParser d = make_parser();
  CHECK_THROWS_WITH(d.parse({"--completely.different=1"}), "tool: unrecognised option '--completely.different=1' (see tool --help)");
  // Lines that are neither a section nor key = value.
  test::write_all(dir / "bad3.ini", "[data]\nseq_len 4\n");
  OptionParser e = make_parser();
  CHECK_THROWS_WITH(e.parse({"--config", dir / "bad3.ini"}), Catch::Contains("bad3.ini:2: 'seq_len 4' is not a `key = value` line"));
  OptionParser f = make_parser();
  CHECK_THROWS_WITH(f.parse({"--config", dir / "missing.ini"}), "tool: cannot read config file " + (dir / "missing.ini"));
}

TEST_CASE("'-' and '_' are one character in keys, on the command line and in the file") {
  test::TempDir dir("opts");
  OptionParser p("tool", "tool");
  p.options().add_options()("seq-len", po::value<int>()->default_value(1), "dash-style")(
      "data.valid_folder", po::value<std::string>()->default_value("v"), "underscore-style")(
      "max-packs_per-shard", po::value<int>()->default_value(0), "mixed");
  test::write_all(dir / "c.ini", "seq_len = 4096\n[data]\nvalid-folder = w  # trailing comment\n");
  REQUIRE(p.parse({"--config", dir / "c.ini", "--max_packs-per_shard=7"}));
  CHECK(p.get<int>("seq-len") == 4096);
  CHECK(p.get<std::string>("data.valid_folder") == "w");
  CHECK(p.get<int>("max-packs_per-shard") == 7);
  // loom writes INI keys with '_', the spelling the docs use; it reads back the same values.
  CHECK(p.resolved_ini() == "max_packs_per_shard = 7\nseq_len = 4096\n[data]\nvalid_folder = w\n");
  test::write_all(dir / "again.ini", p.resolved_ini());
  OptionParser q("tool", "tool");
  q.options().add_options()("seq-len", po::value<int>()->default_value(1), "")(
      "data.valid_folder", po::value<std::string>()->default_value("v"), "")(
      "max-packs_per-shard", po::value<int>()->default_value(0), "");
  REQUIRE(q.parse({"--config", dir / "again.ini", "--seq-len", "5"}));
  CHECK(q.get<int>("seq-len") == 5);  // the command line still wins, whatever the spelling
  CHECK(q.get<int>("max-packs_per-shard") == 7);
  // Both spellings of one key in one place are one option given twice.
  OptionParser r("tool", "tool");
  r.options().add_options()("seq-len", po::value<int>(), "");
  CHECK_THROWS_AS(r.parse({"--seq-len=1", "--seq_len=2"}), UsageError);
}

TEST_CASE("an alias is a second name of an option, listed by --help") {
  test::TempDir dir("opts");
  auto make = [] {
    OptionParser p("tool", "tool");
    p.options().add_options()("threads", po::value<std::string>()->default_value("4"), "threads")(
        "eos", po::bool_switch(), "eos");
    p.alias("workers", "threads");
    p.alias("append-eod", "eos");
    return p;
  };
  OptionParser a = make();
  REQUIRE(a.parse({"--workers", "3", "--append_eod"}));
  CHECK(a.get<std::string>("threads") == "3");
  CHECK(a.get<bool>("eos"));
  test::write_all(dir / "c.ini", "workers = 5\n");
  OptionParser b = make();
  REQUIRE(b.parse({"--config", dir / "c.ini"}));
  CHECK(b.get<std::string>("threads") == "5");
  CHECK_FALSE(b.get<bool>("eos"));
  CHECK_THAT(make().help(), Catch::Contains("Aliases: --workers = --threads; --append-eod = --eos;"));
  OptionParser c = make();
  CHECK_THROWS_WITH(c.parse({"--worker=2"}), Catch::Contains("(did you mean '--workers'?)"));
}

TEST_CASE("edit distance and the nearest key") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("", "ab") == 2);
  CHECK(edit_distance("kitten", "sitting") == 3);  // the textbook pair: k->s, e->i, +g
  CHECK(edit_distance("seqlen", "seq_len") == 1);
  CHECK(edit_distance("flaw", "lawn") == 2);
  CHECK(edit_distance("abcdef", "azcdxf") == 2);
  KeyIndex k;
  for (const char* n : {"data.seq_len", "data.micro_bsz", "adam.lr", "model.hidden_size"}) k.add(n);
  CHECK(k.resolve("data.seq-len") == "data.seq_len");
  CHECK(k.resolve("data.seqlen").empty());
  CHECK(k.nearest("data.seqlen") == "data.seq_len");
  CHECK(k.nearest("data.micro_bs") == "data.micro_bsz");
  CHECK(k.nearest("hidden_size") == "model.hidden_size");
  CHECK(k.nearest("adam.beta") == "");  // 'adam.lr' is 4 edits away: too far to be a typo
  CHECK(k.suggestion("modl.hidden_size", "--") == " (did you mean '--model.hidden_size'?)");
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

TEST_CASE("an error about a token holding a placeholder of Boost's messages names it instead of hanging") {
  // Boost substitutes "%value%" in "the argument ('%value%') for option ... is invalid" until none is
  // left: with the value "%value%" that never ended (found by fuzz/fuzz_ini.cpp).
  test::TempDir dir("opts_placeholder");
  OptionParser p = make_parser();
  CHECK_THROWS_WITH(p.parse({"--data.seq_len=%value%"}),
                    "tool: bad options, and the parser's message cannot be printed: '--data.seq_len=%value%' holds "
                    "%value%, a placeholder of its messages");
  OptionParser q = make_parser();
  CHECK_THROWS_WITH(q.parse({"--%canonical_option%"}),
                    "tool: bad options, and the parser's message cannot be printed: '--%canonical_option%' holds "
                    "%canonical_option%, a placeholder of its messages");
  test::write_all(dir / "c.ini", "[adam]\nlr = 0.5\n[data]\nseq_len = x%value%\n");
  OptionParser r = make_parser();
  CHECK_THROWS_AS(r.parse({"--config", dir / "c.ini"}), UsageError);
  OptionParser r2 = make_parser();
  CHECK_THROWS_WITH(r2.parse({"--config", dir / "c.ini"}),
                    "tool: bad options, and the parser's message cannot be printed: " + dir / "c.ini" +
                        ":4: 'x%value%' holds %value%, a placeholder of its messages");
  // A bool's value is quoted lower-cased, so any case of a placeholder counts.
  OptionParser b("tool", "tool");
  bool flag = false;
  b.options().add_options()("data.check", po::value(&flag), "a flag");
  CHECK_THROWS_WITH(b.parse({"--data.check=%VaLue%"}),
                    "tool: bad options, and the parser's message cannot be printed: '--data.check=%VaLue%' holds "
                    "%value%, a placeholder of its messages");
  // A placeholder in a value that parses is only text.
  OptionParser ok = make_parser();
  REQUIRE(ok.parse({"--job.name=%value%"}));
  CHECK(ok.get<std::string>("job.name") == "%value%");
}

TEST_CASE("a typed double option refuses nan and inf, which its saved configuration could not repeat") {
  for (const std::string bad : {"nan", "NaN", "inf", "-inf", "infinity"}) {
    INFO(bad);
    OptionParser p = make_parser();
    CHECK_THROWS_WITH(p.parse({"--adam.lr=" + bad}), Catch::StartsWith("tool: --adam.lr: ") &&
                                                         Catch::EndsWith(" is not a finite number"));
  }
  test::TempDir dir("opts_nan");
  test::write_all(dir / "c.ini", "[adam]\nlr = Nan\n");  // found by fuzz/fuzz_ini.cpp
  OptionParser p = make_parser();
  CHECK_THROWS_WITH(p.parse({"--config", dir / "c.ini"}), "tool: --adam.lr: nan is not a finite number");
  OptionParser ok = make_parser();
  REQUIRE(ok.parse({"--adam.lr=1e300"}));
  CHECK(ok.get<double>("adam.lr") == 1e300);
}

TEST_CASE("OptionTable: defaults from the fields, the text read back into them, checks naming the key") {
  struct Opts {
    int64_t seq_len = 2048;
    uint64_t seed = 7;
    double lr = 1e-4;
    bool on = true;
    std::string kind = "cosine";
  } o;
  OptionTable t;
  t.add("data.seq_len", &o.seq_len, "tokens per pack", above(0));
  t.add("data.seed", &o.seed, "seed");
  t.add("adam.lr", &o.lr, "learning rate", at_least(0));
  t.add("job.on", &o.on, "switched");
  t.add("lr.kind", &o.kind, "schedule", one_of({"cosine", "constant", "linear"}));
  CHECK(t.keys()[2].default_text == "1e-04");
  auto parse = [&](const std::vector<std::string>& args) {
    OptionParser p("tool", "tool [options]");
    t.declare(p);
    REQUIRE(p.parse(args));
    t.read(p);
  };
  parse({});
  CHECK(t.ini(true).empty());
  CHECK(t.ini(false) == "[adam]\nlr = 1e-04\n[data]\nseed = 7\nseq_len = 2048\n[job]\non = true\n[lr]\nkind = cosine\n");
  parse({"--data.seq-len=+64", "--job.on=off", "--adam.lr=0.50"});
  CHECK(o.seq_len == 64);
  CHECK_FALSE(o.on);
  CHECK(t.ini(true) == "[adam]\nlr = 0.5\n[data]\nseq_len = 64\n[job]\non = false\n");
  CHECK_THROWS_WITH(parse({"--data.seed=-1"}), "--data.seed: '-1' is not an integer in [0, 18446744073709551615]");
  CHECK_THROWS_WITH(parse({"--adam.lr=nan"}), "--adam.lr: 'nan' is not a finite number");
  CHECK_THROWS_WITH(parse({"--job.on=maybe"}), "--job.on: 'maybe' is not a boolean (true or false)");
  CHECK_THROWS_WITH(parse({"--data.seq_len=0"}), "data.seq_len must be > 0, got 0");
  CHECK_THROWS_WITH(parse({"--adam.lr=-1"}), "adam.lr must be >= 0, got -1");
  CHECK_THROWS_WITH(parse({"--lr.kind=step"}), "lr.kind must be cosine, constant or linear, got 'step'");
}
