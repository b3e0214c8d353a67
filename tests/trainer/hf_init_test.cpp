// --init-from-hf on the loom-train binary: a checkpoint exported with export-hf starts a
// run exactly as --init-from the checkpoint itself does (fp32 export is bitwise), and a folder whose
// architecture differs from model.* is refused, naming the difference.
#include <catch2/catch.hpp>

#include <cctype>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "checkpoint.h"
#include "hf_export.h"
#include "loom/cli.h"
#include "loom/hash.h"
#include "loom/sys.h"
#include "loop_fixture.h"
#include "test_util.h"

namespace {

using loom::test::quote;
using loom::test::read_all;

loom::test::RunResult train(const std::string& data, const std::string& run_dir, std::vector<std::string> extra) {
  std::vector<std::string> all = {"--model.vocab_size=2000", "--model.dropout=0", "--monitor.startup_probe=false",
                                  "--data.total_steps=3"};
  all.insert(all.end(), extra.begin(), extra.end());
  std::string cmd = quote(LOOM_TRAIN_BIN);
  for (const auto& a : loom::test::loop_args(data, run_dir, all)) cmd += " " + quote(a);
  return loom::test::run(cmd + " 2>&1");
}

// The loss digits of each training line of metrics.jsonl, in step order.
std::vector<std::string> losses(const std::string& run_dir) {
  std::vector<std::string> out;
  for (const auto& kv : loom::test::metric_text(run_dir + "/metrics.jsonl", "loss")) out.push_back(kv.second);
  return out;
}

// Every file under dir, by path, with its bytes.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const std::string& f : loom::sys::list_files(dir)) out[f] = read_all(f);
  return out;
}

loom::test::RunResult export_hf(const std::string& ckpt, const std::string& output, const std::string& extra = "") {
  return loom::test::run(quote(LOOM_TRAIN_BIN) + " export-hf --checkpoint " + quote(ckpt) + " --output " +
                         quote(output) + " --tokenizer " +
                         quote(loom::test::source_dir() + "/data_samples/spm_2k.model") + extra + " 2>&1");
}

}  // namespace

// An --output that is, or lies inside, a checkpoint folder would overwrite the checkpoint it
// exports: refused with the usage code before anything is written, however the path is spelled.
TEST_CASE("hf export: an output inside a checkpoint folder or a non-empty folder is refused, the checkpoint intact",
          "[hf]") {
  namespace fs = std::filesystem;
  loom::test::TempDir dir("hf_export_guard");
  loom::test::write_loop_data(dir / "data");
  auto a = train(dir / "data", dir / "a", {"--data.total_steps=2"});
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const std::string ckpts = dir / "a/checkpoints";
  const std::string ckpt = ckpts + "/step_2";
  const auto before = snapshot(ckpts);
  REQUIRE(before.count(ckpt + "/model.safetensors"));
  fs::create_directory_symlink(ckpt, dir / "link");

  struct Case {
    std::string checkpoint, output, extra;
  };
  for (const Case& c : std::vector<Case>{
           {ckpt, ckpt, ""},                                    // the exported checkpoint itself
           {ckpt, ckpt, " --force"},                            // --force does not lift it
           {ckpt, ckpt + "/hf", ""},                            // a new folder inside it
           {ckpts, ckpts, ""},                                  // the checkpoints folder (`latest`)
           {ckpt, ckpts + "/step_9", " --force"},               // where the trainer saves next
           {ckpt, dir / "a/checkpoints/../checkpoints/step_2/", ""},  // another spelling
           {ckpt, dir / "link", ""},                            // through a symlink
           {ckpt, dir / "link/sub", ""},
       }) {
    auto r = export_hf(c.checkpoint, c.output, c.extra);
    INFO(c.output << c.extra << "\n" << r.output);
    CHECK(r.exit_code == loom::kExitUsage);
    CHECK(r.output.find("--output " + c.output) != std::string::npos);
    CHECK(r.output.find(c.checkpoint) != std::string::npos);
    CHECK(r.output.find("checkpoint folder") != std::string::npos);
    CHECK(snapshot(ckpts) == before);
  }
  CHECK(!fs::exists(ckpt + "/hf"));
  CHECK(!fs::exists(ckpts + "/step_9"));
  CHECK(!fs::exists(ckpt + "/config.json"));

  // A folder that holds files: refused without --force; with it the export writes its own files
  // and leaves the others.
  const std::string other = dir / "other";
  fs::create_directories(other);
  loom::test::write_all(other + "/notes.txt", "mine");
  auto r = export_hf(ckpt, other);
  INFO(r.output);
  CHECK(r.exit_code == loom::kExitUsage);
  CHECK(r.output.find("--output " + other) != std::string::npos);
  CHECK(r.output.find(ckpt) != std::string::npos);
  CHECK(r.output.find("--force") != std::string::npos);
  CHECK(!fs::exists(other + "/config.json"));
  r = export_hf(ckpt, other, " --force");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(read_all(other + "/notes.txt") == "mine");
  CHECK(fs::exists(other + "/config.json"));
  // A rerun into its own output needs --force too; a new folder does not.
  CHECK(export_hf(ckpt, other).exit_code == loom::kExitUsage);
  CHECK(export_hf(ckpt, other, " --force").exit_code == 0);
  CHECK(export_hf(ckpt, dir / "fresh/hf").exit_code == 0);
  CHECK(snapshot(ckpts) == before);
}

// How a checkpoint folder is recognised, without a run: a step_N folder being written (state.json,
// no manifest yet) and a folder holding step_N.tmp only.
TEST_CASE("hf export: check_export_output recognises checkpoint folders by their layout", "[hf]") {
  namespace fs = std::filesystem;
  loom::test::TempDir dir("hf_export_layout");
  fs::create_directories(dir / "run/step_3");
  loom::test::write_all(dir / "run/step_3/state.json", "{}");
  fs::create_directories(dir / "tmp_only/step_4.tmp");
  fs::create_directories(dir / "plain/step_x");
  const auto refused = [](const std::string& out, const std::string& ck, bool force) {
    try {
      loom::hf::check_export_output(out, ck, force);
      return std::string();
    } catch (const loom::UsageError& e) {
      return std::string(e.what());
    }
  };
  CHECK_THAT(refused(dir / "run/step_3/hf", dir / "elsewhere", false),
             Catch::Contains("is inside the loom checkpoint folder") && Catch::Contains("step_3"));
  CHECK_THAT(refused(dir / "run", dir / "elsewhere", true), Catch::Contains("is the loom checkpoint folder"));
  CHECK_THAT(refused(dir / "tmp_only/x", dir / "elsewhere", true), Catch::Contains("tmp_only"));
  CHECK(refused(dir / "plain/step_x/new", dir / "elsewhere", false).empty());  // not step_<digits>
  CHECK(refused(dir / "new", dir / "elsewhere", false).empty());
  CHECK_THAT(refused(dir / "plain", dir / "elsewhere", false), Catch::Contains("--force"));
  CHECK(refused(dir / "plain", dir / "elsewhere", true).empty());
}

TEST_CASE("hf init: --init-from-hf of an export equals --init-from of its checkpoint", "[hf]") {
  loom::test::TempDir dir("hf_init");
  loom::test::write_loop_data(dir / "data");
  auto a = train(dir / "data", dir / "a", {"--data.total_steps=2"});
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const std::string ckpt = dir / "a/checkpoints/step_2";
  auto e = loom::test::run(quote(LOOM_TRAIN_BIN) + " export-hf --checkpoint " + quote(ckpt) + " --output " +
                           quote(dir / "hf") + " --tokenizer " +
                           quote(loom::test::source_dir() + "/data_samples/spm_2k.model") + " 2>&1");
  INFO(e.output);
  REQUIRE(e.exit_code == 0);

  auto b = train(dir / "data", dir / "b", {"--init-from=" + ckpt});
  auto c = train(dir / "data", dir / "c", {"--init-from-hf=" + dir / "hf"});
  INFO(b.output << c.output);
  REQUIRE(b.exit_code == 0);
  REQUIRE(c.exit_code == 0);
  REQUIRE(c.output.find("initialised the weights from the Hugging Face folder") != std::string::npos);
  REQUIRE(losses(dir / "b").size() == 3);
  REQUIRE(losses(dir / "c") == losses(dir / "b"));
  REQUIRE(read_all(dir / "c/checkpoints/step_3/model.safetensors") ==
          read_all(dir / "b/checkpoints/step_3/model.safetensors"));
  // A fresh run starts elsewhere: the weights did come from the folder.
  auto fresh = train(dir / "data", dir / "fresh", {});
  REQUIRE(fresh.exit_code == 0);
  REQUIRE(losses(dir / "fresh").front() != losses(dir / "c").front());

  // Another architecture is refused before training, naming the key.
  auto bad = train(dir / "data", dir / "bad", {"--init-from-hf=" + dir / "hf", "--model.hidden_size=64"});
  INFO(bad.output);
  REQUIRE(bad.exit_code == 1);
  REQUIRE(bad.output.find("hidden_size") != std::string::npos);
  // And it excludes --init-from.
  auto both = train(dir / "data", dir / "both", {"--init-from-hf=" + dir / "hf", "--init-from=" + ckpt});
  REQUIRE(both.exit_code == 2);
  REQUIRE(both.output.find("exclude each other") != std::string::npos);
}

// data.tokenizer: checked against the shards' fingerprint at start, copied into each checkpoint
// (in its manifest), and then what export-hf and generate use when --tokenizer is left out; a
// --tokenizer of other bytes is refused for that checkpoint.
TEST_CASE("hf init: data.tokenizer is checked, recorded in checkpoints, and used by export-hf and generate", "[hf]") {
  loom::test::TempDir dir("hf_tokenizer");
  const std::string spm = loom::test::source_dir() + "/data_samples/spm_2k.model";
  const std::string other = loom::test::test_data_dir() + "/spm_test_unigram_1k.model";
  loom::test::write_loop_data(dir / "data", loom::xxh64_file(spm));
  auto wrong = train(dir / "data", dir / "wrong", {"--data.tokenizer=" + other});
  INFO(wrong.output);
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.output.find("is not the model the data in") != std::string::npos);

  auto a = train(dir / "data", dir / "a", {"--data.tokenizer=" + spm, "--data.total_steps=2"});
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const std::string ckpt = dir / "a/checkpoints/step_2";
  CHECK(read_all(ckpt + "/tokenizer.model") == read_all(spm));
  CHECK(read_all(ckpt + "/manifest.json").find("\"tokenizer.model\"") != std::string::npos);
  CHECK(loom::validate_checkpoint(ckpt) == 2);

  auto e = loom::test::run(quote(LOOM_TRAIN_BIN) + " export-hf --checkpoint " + quote(ckpt) + " --output " +
                           quote(dir / "hf") + " 2>&1");
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  CHECK(read_all(dir / "hf/tokenizer.model") == read_all(spm));
  auto g = loom::test::run(quote(LOOM_TRAIN_BIN) + " generate --checkpoint " + quote(ckpt) +
                           " --prompt hello --max-new-tokens 2 2>&1");
  INFO(g.output);
  CHECK(g.exit_code == 0);
  // Its log line for people: the time and the rate with a few significant digits (not 0.0191381 s).
  std::smatch m;
  const std::regex line(R"(generate: \d+ prompt tokens, \d+ new tokens in (\S+) s \((\S+) tokens/s\))");
  REQUIRE(std::regex_search(g.output, m, line));
  for (const std::string& figure : {m.str(1), m.str(2)}) {
    INFO(figure);
    if (figure.find(',') != std::string::npos) continue;  // 1,234: a count, whole
    std::string digits;
    for (char ch : figure.substr(0, figure.find('e')))
      if (std::isdigit(static_cast<unsigned char>(ch)) && !(digits.empty() && ch == '0')) digits += ch;
    CHECK(digits.size() <= 3);
  }
  auto bad = loom::test::run(quote(LOOM_TRAIN_BIN) + " export-hf --checkpoint " + quote(ckpt) + " --output " +
                             quote(dir / "hf2") + " --tokenizer " + quote(other) + " 2>&1");
  INFO(bad.output);
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("not the tokenizer " + ckpt + " was trained with") != std::string::npos);
}
