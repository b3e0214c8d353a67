// `loom-pack pack` on InternLM shards (tools/tokenizer.py's format) given directly, against
// convert-then-pack and against packing the loom shards they came from; and pack's INI keys in
// either spelling ('-' or '_').
#include <catch2/catch.hpp>

#include "fixtures.h"
#include "loom/error.h"
#include "run_checks.h"

using namespace loom;
using namespace loom::test;

namespace {

// loom/a.bin, loom/b.bin: botchan in two loom shards; internlm/a.bin, internlm/b.bin: the same
// documents in InternLM's format (convert --to internlm, lossless).
void write_inputs(const TempDir& dir) {
  const Docs& all = botchan_docs();
  const auto half = static_cast<std::ptrdiff_t>(all.size() / 2);
  run("mkdir -p " + quote(dir / "loom"));
  write_shard(dir / "loom/a.bin", Docs(all.begin(), all.begin() + half), internlm_info());
  write_shard(dir / "loom/b.bin", Docs(all.begin() + half, all.end()), internlm_info());
  require_ok(loom_pack("convert --to internlm --output-dir " + quote(dir / "internlm") + " " + quote(dir / "loom") + " 2>&1"));
}

const char* kPack = "pack --seq-len 512 --strategy bestfit --seed 7 ";

}  // namespace

TEST_CASE("pack reads InternLM shards: the same packs as convert-then-pack and as the loom originals", "[pack][e2e]") {
  TempDir dir("pack_internlm");
  write_inputs(dir);
  const std::string model = " --model " + quote(internlm_model()) + " ";
  // Directly.
  const RunResult direct = loom_pack(kPack + model + "--output-dir " + quote(dir / "direct") + " " +
                                     quote(dir / "internlm") + " 2>&1");
  INFO(direct.output);
  REQUIRE(direct.exit_code == 0);
  CHECK_THAT(direct.output, Catch::Contains("2 InternLM shard(s) read through their loom conversion"));
  // convert, then pack.
  require_ok(loom_pack("convert --to loom" + model + "--output-dir " + quote(dir / "conv") + " " + quote(dir / "internlm") + " 2>&1"));
  require_ok(loom_pack(kPack + std::string("--output-dir ") + quote(dir / "two_step") + " " + quote(dir / "conv") + " 2>&1"));
  // The loom shards the InternLM ones were made from.
  require_ok(loom_pack(kPack + std::string("--output-dir ") + quote(dir / "orig") + " " + quote(dir / "loom") + " 2>&1"));
  for (const char* f : {"packed.bin", "packed.bin.meta"}) {
    require_same_file(dir / ("direct/" + std::string(f)), dir / ("two_step/" + std::string(f)));
    require_same_file(dir / ("direct/" + std::string(f)), dir / ("orig/" + std::string(f)));
  }
  // No scratch left behind, and the packs check out against the source documents (numpy reference).
  CHECK(run("ls -A " + quote(dir / "direct")).output == "packed.bin\npacked.bin.meta\n");
  const RunResult c = run(python() + " " + quote(source_dir() + "/tests/packer/check_packed.py") + " bestfit " +
                          quote(dir / "loom") + " " + quote(dir / "direct/packed.bin"));
  INFO(c.output);
  CHECK(c.exit_code == 0);
}

TEST_CASE("pack takes loom and InternLM shards together, and InternLM ones without a model", "[pack][e2e]") {
  TempDir dir("pack_internlm_mixed");
  write_inputs(dir);
  // loom a + InternLM b = loom a + loom b.
  require_ok(loom_pack(kPack + std::string("--model ") + quote(internlm_model()) + " --output-dir " + quote(dir / "mixed") +
                       " " + quote(dir / "loom/a.bin") + " " + quote(dir / "internlm/b.bin") + " 2>&1"));
  require_ok(loom_pack(kPack + std::string("--output-dir ") + quote(dir / "orig") + " " + quote(dir / "loom") + " 2>&1"));
  require_same_file(dir / "mixed/packed.bin", dir / "orig/packed.bin");
  require_same_file(dir / "mixed/packed.bin.meta", dir / "orig/packed.bin.meta");
  // --vocab-size instead of --model: as convert --vocab-size then pack.
  require_ok(loom_pack(kPack + std::string("--vocab-size 103168 --output-dir ") + quote(dir / "vs") + " " +
                       quote(dir / "internlm") + " 2>&1"));
  require_ok(loom_pack("convert --to loom --vocab-size 103168 --output-dir " + quote(dir / "conv") + " " + quote(dir / "internlm") + " 2>&1"));
  require_ok(loom_pack(kPack + std::string("--output-dir ") + quote(dir / "vs2") + " " + quote(dir / "conv") + " 2>&1"));
  require_same_file(dir / "vs/packed.bin", dir / "vs2/packed.bin");
  require_same_file(dir / "vs/packed.bin.meta", dir / "vs2/packed.bin.meta");
  CHECK(run("ls -A " + quote(dir / "vs")).output == "packed.bin\npacked.bin.meta\n");
  // Mixed without the model: the converted shard has no fingerprint, so the tokenizers differ.
  const RunResult bad = loom_pack(kPack + std::string("--output-dir ") + quote(dir / "bad") + " " + quote(dir / "loom/a.bin") +
                                  " " + quote(dir / "internlm/b.bin") + " 2>&1");
  INFO(bad.output);
  CHECK(bad.exit_code == 1);
  CHECK(run("ls -A " + quote(dir / "bad") + " 2>/dev/null").output.empty());
}

TEST_CASE("pack's INI keys take '-' or '_', and an unknown one names its line and the nearest key", "[pack][e2e]") {
  TempDir dir("pack_ini_keys");
  write_inputs(dir);
  write_all(dir / "u.ini", "seq_len = 512\nstrategy = bestfit\nseed = 7\noutput_dir = " + (dir / "u") + "\n");
  write_all(dir / "d.ini", "seq-len = 512\nstrategy = bestfit\nseed = 7\noutput-dir = " + (dir / "d") + "\n");
  require_ok(loom_pack("pack --config " + quote(dir / "u.ini") + " " + quote(dir / "loom") + " 2>&1"));
  require_ok(loom_pack("pack --config " + quote(dir / "d.ini") + " " + quote(dir / "loom") + " 2>&1"));
  require_ok(loom_pack("pack --seq_len 512 --strategy bestfit --seed 7 --output_dir " + quote(dir / "c") + " " +
                       quote(dir / "loom") + " 2>&1"));
  require_ok(loom_pack(kPack + std::string("--output-dir ") + quote(dir / "o") + " " + quote(dir / "loom") + " 2>&1"));
  for (const char* d : {"u", "d", "c"}) require_same_file(dir / (std::string(d) + "/packed.bin.meta"), dir / "o/packed.bin.meta");
  write_all(dir / "bad.ini", "# pack settings\nseq_len = 512\nstrateg = bestfit\n");
  const RunResult r = loom_pack("pack --config " + quote(dir / "bad.ini") + " " + quote(dir / "loom") + " 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains((dir / "bad.ini") + ":3: unknown key 'strateg' (did you mean 'strategy'?)"));
}

TEST_CASE("loom -> InternLM -> loom: the same .bin, and the same .meta but the two fields InternLM cannot hold",
          "[convert][e2e]") {
  TempDir dir("convert_round_trip");
  const std::string model = quote(internlm_model());
  // loom-tokenize records what encoded the text (encoder) and with which settings (settings_xxh64).
  require_ok(run(std::string(LOOM_TOKENIZE_BIN) + " --model " + model + " --output-dir " + quote(dir / "tok") + " " +
                 quote(test_data_dir() + "/botchan.txt") + " 2>&1"));
  require_ok(loom_pack("convert --to internlm --output-dir " + quote(dir / "internlm") + " " +
                       quote(dir / "tok/botchan.bin") + " 2>&1"));
  require_ok(loom_pack("convert --to loom --model " + model + " --output-dir " + quote(dir / "back") + " " +
                       quote(dir / "internlm/botchan.bin") + " 2>&1"));
  CHECK(read_all(dir / "back/botchan.bin") == read_all(dir / "tok/botchan.bin"));
  std::string before = read_all(dir / "tok/botchan.bin.meta");
  const std::string after = read_all(dir / "back/botchan.bin.meta");
  REQUIRE(before.size() == after.size());
  const std::string zero4(4, '\0'), zero8(8, '\0');
  CHECK(before.substr(80, 4) != zero4);  // encoder
  CHECK(before.substr(88, 8) != zero8);  // settings_xxh64
  CHECK(after.substr(80, 4) == zero4);   // 0: not recorded
  CHECK(after.substr(88, 8) == zero8);
  before.replace(80, 4, zero4).replace(88, 8, zero8);
  CHECK(before == after);  // every other byte: header, offsets and their checksums
}
