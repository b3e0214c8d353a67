// loom-tokenize end to end, against reference.py (Python sentencepiece + numpy, following InternLM's
// tools/tokenizer.py) and against itself (threads, compression, kill and rerun).
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "loom/hash.h"
#include "loom/shard_format.h"
#include "loom/tokenize/tokenize_job.h"
#include "run_checks.h"
#include "tok_test_util.h"

using namespace loom::test;

namespace {
const std::string kQuiet = " 2>&1";

std::string q(const std::string& s) { return quote(s); }
}  // namespace

TEST_CASE("loom shards equal the Python sentencepiece reference on botchan and wagahaiwa", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_ids");
  require_ok(tokenize("--model " + q(internlm_model()) + " --output-dir " + q(dir / "out") + " " +
                      q(corpus("botchan.txt")) + " " + q(corpus("wagahaiwa_nekodearu.txt"))));
  auto b = run(reference_py() + " check-loom " + q(internlm_model()) + " " + q(corpus("botchan.txt")) + " " + q(dir / "out/botchan.bin"));
  INFO(b.output);
  CHECK(b.exit_code == 0);
  CHECK(b.output == "OK 4288 74345\n");
  auto w = run(reference_py() + " check-loom " + q(internlm_model()) + " " + q(corpus("wagahaiwa_nekodearu.txt")) + " " +
               q(dir / "out/wagahaiwa_nekodearu.bin"));
  INFO(w.output);
  CHECK(w.exit_code == 0);
  CHECK(w.output == "OK 2344 310533\n");
  // The header as loom's own reader sees it.
  loom::ShardReader r(dir / "out/botchan.bin");
  CHECK(r.header().vocab_size == 103168);
  CHECK(r.dtype_bytes() == 4);
  CHECK(r.header().bos_id == 1);
  CHECK(r.header().eos_id == 2);
  CHECK(r.header().flags == (loom::kShardFlagBos | loom::kShardFlagEos));
  r.verify_deep();
}

TEST_CASE("a known sentence encodes to InternLM's documented ids", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_golden");
  write_all(dir / "s.txt", "今天天气晴朗适合出门散步\n");
  require_ok(tokenize("--model " + q(internlm_model()) + " --output-dir " + q(dir / "out") + " --no-bos --no-eos " + q(dir / "s.txt")));
  loom::ShardReader r(dir / "out/s.bin");
  std::vector<uint32_t> ids;
  r.read_doc(0, ids);
  CHECK(ids == std::vector<uint32_t>{67577, 69095, 63010, 61770, 67783, 69301, 74732});
  CHECK(r.header().flags == 0);
}

TEST_CASE("format internlm is byte identical to the tools/tokenizer.py reference", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_internlm");
  const std::string m = q(internlm_model());
  struct Case {
    std::string input, flags, name;
  };
  const Case cases[] = {
      {corpus("botchan.txt"), "", "botchan"},
      {sample("neko_head.jsonl.gz"), "--text-key text", "neko_head"},
      {sample("neko_head.jsonl.gz"), "--raw-records", "neko_head"},
      {sample("botchan_tail.json"), "--raw-records", "botchan_tail"},
      {sample("botchan_tail.json"), "--text-key meta.source", "botchan_tail"},
  };
  int k = 0;
  for (const Case& c : cases) {
    SECTION(c.name + " " + c.flags + " " + std::to_string(k)) {
      require_ok(tokenize("--model " + m + " --format internlm --output-dir " + q(dir / "out") + " " + c.flags + " " + q(c.input)));
      require_ok(run(reference_py() + " internlm " + m + " " + q(c.input) + " " + q(dir / "ref.bin") + " " + c.flags));
      require_same_file(dir / ("out/" + c.name + ".bin"), dir / "ref.bin");
      require_same_file(dir / ("out/" + c.name + ".bin.meta"), dir / "ref.bin.meta");
    }
    ++k;
  }
}

TEST_CASE("txt paragraph and file documents, and long documents cut under --max-doc-bytes", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_docs");
  const std::string m = q(internlm_model());
  write_all(dir / "p.txt", "\xef\xbb\xbf Title line\r\n\r\nFirst paragraph, line one.\r\nline two  \r\n \r\n\r\n"
                           "Second paragraph\nwith \xe5\x90\xbe\xe8\xbc\xa9 and spaces   inside.\n");
  for (const std::string mode : {"paragraph", "file"}) {
    SECTION(mode) {
      require_ok(tokenize("--model " + m + " --output-dir " + q(dir / "out") + " --txt-doc " + mode + " " + q(dir / "p.txt")));
      auto r = run(reference_py() + " check-loom " + m + " " + q(dir / "p.txt") + " " + q(dir / "out/p.bin") + " --txt-doc " + mode);
      INFO(r.output);
      CHECK(r.exit_code == 0);
      CHECK(r.output == (mode == "paragraph" ? "OK 3 " : "OK 1 ") + r.output.substr(5));
    }
  }
  SECTION("a whole file cut into pieces of at most 100 bytes") {
    require_ok(tokenize("--model " + m + " --output-dir " + q(dir / "out") + " --txt-doc file --max-doc-bytes 100 " +
                        q(sample("botchan_head.txt"))));
    auto r = run(reference_py() + " check-loom " + m + " " + q(sample("botchan_head.txt")) + " " + q(dir / "out/botchan_head.bin") +
                 " --txt-doc file --max-doc-bytes 100");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.rfind("OK 1 ", 0) == 0);
    // bos/eos once around the whole document, not around each piece.
    loom::ShardReader s(dir / "out/botchan_head.bin");
    std::vector<uint32_t> ids;
    s.read_doc(0, ids);
    CHECK(std::count(ids.begin(), ids.end(), 1u) == 1);
    CHECK(std::count(ids.begin(), ids.end(), 2u) == 1);
    CHECK(ids.front() == 1);
    CHECK(ids.back() == 2);
  }
}

TEST_CASE("long documents without whitespace, cut under --max-doc-bytes, decode to themselves with either encoder",
          "[tokenize][e2e]") {
  TempDir dir("tok_e2e_spaceless");
  // Long runs of CJK, digits and ASCII without a space, and one mixing words with such runs: the
  // pieces after a cut must not gain the dummy-prefix U+2581 (a space on decoding).
  REQUIRE(python_code(dir, "import json\n"
                           "cjk = '\u543e\u8f29\u306f\u732b\u3067\u3042\u308b\u3002\u540d\u524d\u306f\u307e\u3060\u7121\u3044\u3002'\n"
                           "docs = [cjk * 300, '31415926535897932384626433832795' * 200,\n"
                           "        'thequickbrownfoxjumpsoverthelazydog' * 200, ('word ' * 60 + 'x' * 700) * 10]\n"
                           "with open('" + dir / "long.jsonl" + "', 'w') as f:\n"
                           "    for d in docs: f.write(json.dumps({'text': d}) + '\\n')\n")
              .exit_code == 0);
  int checked = 0;
  for (const std::string& model : {internlm_model(), corpus("spm_test_unigram_1k.model"), sample("spm_2k.model")}) {
    INFO(model);
    for (const std::string enc : {"loom", "sentencepiece"}) {
      require_ok(tokenize("--model " + q(model) + " --encoder " + enc + " --max-doc-bytes 1000 --output-dir " +
                          q(dir / enc) + " " + q(dir / "long.jsonl")));
    }
    require_same_file(dir / "loom/long.bin", dir / "sentencepiece/long.bin");
    // Python's sentencepiece decodes every document back to its text, wherever the model can spell
    // the text at all (decoding the whole document's ids gives it back).
    auto r = python_code(dir, "import json, numpy as np, sentencepiece as spm\n"
                              "sp = spm.SentencePieceProcessor(model_file='" + model + "')\n"
                              "b = '" + dir / "loom/long.bin" + "'\n"
                              "h = np.fromfile(b + '.meta', dtype=np.uint8, count=128)\n"
                              "dt = {2: '<u2', 4: '<u4'}[int(h[16:20].view('<u4')[0])]\n"
                              "off = np.fromfile(b + '.meta', dtype='<u8', offset=128)\n"
                              "tok = np.fromfile(b, dtype=dt)\n"
                              "n = 0\n"
                              "for i, line in enumerate(open('" + dir / "long.jsonl" + "')):\n"
                              "    text = json.loads(line)['text']\n"
                              "    if sp.decode(sp.encode(text)) != text: continue\n"
                              "    ids = tok[off[i]:off[i + 1]].tolist()[1:-1]\n"
                              "    got = sp.decode(ids)\n"
                              "    assert got == text, (i, len(got), len(text), got[:80])\n"
                              "    n += 1\n"
                              "print('OK', n)\n");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    checked += std::stoi(r.output.substr(3));
    auto ref = run(reference_py() + " check-loom " + q(model) + " " + q(dir / "long.jsonl") + " " +
                   q(dir / "loom/long.bin") + " --max-doc-bytes 1000");
    INFO(ref.output);
    CHECK(ref.exit_code == 0);
  }
  CHECK(checked == 4 + 2 + 4);  // the 1k model spells neither the CJK nor every digit
}

TEST_CASE("the output is the same for any thread count", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_threads");
  const std::string common = "--model " + q(internlm_model()) + " --batch-bytes 2000 --max-doc-bytes 300 " +
                             q(corpus("wagahaiwa_nekodearu.txt")) + " " + q(sample("botchan_tail.json"));
  for (int t : {1, 2, 5}) require_ok(tokenize(common + " --threads " + std::to_string(t) + " --output-dir " + q(dir / std::to_string(t))));
  for (const std::string f : {"wagahaiwa_nekodearu.bin", "wagahaiwa_nekodearu.bin.meta", "botchan_tail.bin", "botchan_tail.bin.meta"}) {
    require_same_file(dir / ("1/" + f), dir / ("2/" + f));
    require_same_file(dir / ("1/" + f), dir / ("5/" + f));
  }
}

namespace {

// Runs `common` at 1, 2, 3, 8 and 16 threads x --batch-bytes 1, 100 and 65536, each into its own
// folder of dir, and requires every shard (NAME.bin, NAME.bin.meta) to equal dir/ref's.
void require_same_at_any_threads_and_batch(const TempDir& dir, const std::string& common,
                                           const std::vector<std::string>& names) {
  for (int t : {1, 2, 3, 8, 16}) {
    for (int b : {1, 100, 65536}) {
      const std::string run_name = std::to_string(t) + "_" + std::to_string(b);
      require_ok(tokenize(common + " --threads " + std::to_string(t) + " --batch-bytes " + std::to_string(b) +
                          " --output-dir " + q(dir / run_name)));
      for (const std::string& name : names) {
        for (const std::string& f : {name + ".bin", name + ".bin.meta"}) {
          INFO(run_name << " " << f);
          require_same_file(dir / ("ref/" + f), dir / (run_name + "/" + f));
        }
      }
    }
  }
}

}  // namespace

// The pipeline's hand-offs at their edges: one line per batch (--batch-bytes 1: a window of 16N
// batches, the reader refilled 2N at a time, the writer woken for runs of up to 8), more encoder
// threads than batches in a run, and more threads than cores; txt lines go as blocks to the
// encoders, a json array's documents are cut into batches by the reading thread.
TEST_CASE("the output is the same for any thread count and batch size", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_batches");
  const std::string common = "--model " + q(internlm_model()) + " --max-doc-bytes 300 " + q(sample("botchan_head.txt")) +
                             " " + q(sample("botchan_tail.json"));
  require_ok(tokenize(common + " --threads 1 --output-dir " + q(dir / "ref")));
  require_same_at_any_threads_and_batch(dir, common, {"botchan_head", "botchan_tail"});
}

// txt paragraphs also go to the encoders as blocks, cut by the reading thread after a blank line:
// blank lines of every kind and line ending (CR-only files too), leading ones and runs of them,
// paragraphs and lines longer than a 64 KiB block, cut documents, no newline at the end.
TEST_CASE("txt paragraphs are the same for any thread count and batch size, and equal the reference", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_paragraphs");
  REQUIRE(python_code(dir, "import random\n"
                           "random.seed(5)\n"
                           "words = open('" + corpus("botchan.txt") + "', encoding='utf-8').read().split()\n"
                           "blank = ['', ' ', '\\t', '\\u3000', '\\x0c \\x85', '\\u2028 ']\n"
                           "def make(eol):\n"
                           "    parts = [random.choice(blank) + random.choice(eol) for _ in range(3)]\n"
                           "    for i in range(300):\n"
                           "        n = 800 if i % 97 == 5 else random.randint(1, 6)\n"
                           "        for k in range(n):\n"
                           "            line = ' '.join(random.choice(words) for _ in range(random.randint(1, 25)))\n"
                           "            parts.append(('  ' + line + ' \\t' if k % 4 == 3 else line) + random.choice(eol))\n"
                           "        if i % 50 == 7: parts.append('x' * 70000 + random.choice(eol))\n"
                           "        for k in range(random.choice([1, 1, 2, 5])): parts.append(random.choice(blank) + random.choice(eol))\n"
                           "    return ''.join(parts) + 'the last paragraph, no newline at its end'\n"
                           "open('" + dir / "mixed.txt" + "', 'w', encoding='utf-8', newline='').write(make(['\\n', '\\r\\n', '\\r']))\n"
                           "open('" + dir / "cr.txt" + "', 'w', encoding='utf-8', newline='').write(make(['\\r']))\n")
              .exit_code == 0);
  const std::string m = q(internlm_model());
  const std::string common = "--model " + m + " --txt-doc paragraph --max-doc-bytes 300 " + q(dir / "mixed.txt") + " " +
                             q(dir / "cr.txt");
  require_ok(tokenize(common + " --threads 1 --output-dir " + q(dir / "ref")));
  for (const std::string name : {"mixed", "cr"}) {
    auto r = run(reference_py() + " check-loom " + m + " " + q(dir / (name + ".txt")) + " " + q(dir / ("ref/" + name + ".bin")) +
                 " --txt-doc paragraph --max-doc-bytes 300");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.rfind("OK ", 0) == 0);
  }
  require_same_at_any_threads_and_batch(dir, common, {"mixed", "cr"});
}

// Invalid UTF-8 in a paragraph: the error names the paragraph's first line and the bad byte; with
// --on-error skip that paragraph alone is skipped and every paragraph after it is kept, whatever
// the thread count and batch size.
TEST_CASE("txt paragraphs with invalid UTF-8 are reported at the paragraph, for any thread count and batch size",
          "[tokenize][e2e]") {
  TempDir dir("tok_e2e_paragraph_bad");
  std::string text = "\r\none\r\n\r\n";
  for (int i = 0; i < 2000; ++i) text += "paragraph " + std::to_string(i) + "\nsecond line\n\n";
  // The bad paragraph's first line ends at byte 65536, where a cut after any line would fall.
  text += std::string(65536 - 9 - 2 - text.size(), 'z') + "\n\n";
  const size_t at = text.size() + 17;  // the 0xff after "line 2 b"
  text += "line 1 a\nline 2 b\xff\n\nnext paragraph\n\n";
  for (int i = 0; i < 2000; ++i) text += "after " + std::to_string(i) + "\r\r";
  write_all(dir / "bad.txt", text);
  // "line 1 a" is line 3 + 3 * 2000 + 2 + 1.
  const std::string want = dir / "bad.txt" + ":6006: invalid UTF-8 at byte offset " + std::to_string(at);
  for (int t : {1, 3, 8}) {
    for (int b : {1, 100, 65536}) {
      const std::string base = "--model " + q(internlm_model()) + " --txt-doc paragraph --threads " + std::to_string(t) +
                               " --batch-bytes " + std::to_string(b) + " " + q(dir / "bad.txt");
      INFO(t << " threads, --batch-bytes " << b);
      auto fail = tokenize(base + " --output-dir " + q(dir / "fail"));
      INFO(fail.output);
      CHECK(fail.exit_code == 1);
      CHECK(fail.output.find("ERROR " + want + " (--on-error fail stops here") != std::string::npos);
      auto skip = tokenize(base + " --on-error skip --output-dir " + q(dir / "skip"));
      INFO(skip.output);
      REQUIRE(skip.exit_code == 0);
      CHECK(skip.output.find("WARN skipped " + want + "\n") != std::string::npos);
      // 2002 paragraphs before it, "next paragraph" and the 2000 "after" ones.
      CHECK(skip.output.find("bad.bin: 4,003 docs, ") != std::string::npos);
      CHECK(skip.output.find(", 1 bad record skipped\n") != std::string::npos);
    }
  }
}

TEST_CASE("gz and zst inputs give the same shards as the plain input", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_compressed");
  const std::string plain = dir / "plain/neko.jsonl";
  run("mkdir -p " + q(dir / "plain") + " " + q(dir / "gz") + " " + q(dir / "zst"));
  REQUIRE(run("gzip -dc " + q(sample("neko_head.jsonl.gz")) + " > " + q(plain)).exit_code == 0);
  REQUIRE(run("gzip -c " + q(plain) + " > " + q(dir / "gz/neko.jsonl.gz")).exit_code == 0);
  REQUIRE(run("zstd -q -c " + q(plain) + " > " + q(dir / "zst/neko.jsonl.zst")).exit_code == 0);
  for (const std::string v : {"plain/neko.jsonl", "gz/neko.jsonl.gz", "zst/neko.jsonl.zst"}) {
    require_ok(tokenize("--model " + q(internlm_model()) + " --output-dir " + q(dir / ("out_" + v.substr(0, v.find('/')))) + " " + q(dir / v)));
  }
  for (const std::string f : {"neko.bin", "neko.bin.meta"}) {
    require_same_file(dir / ("out_plain/" + f), dir / ("out_gz/" + f));
    require_same_file(dir / ("out_plain/" + f), dir / ("out_zst/" + f));
  }
}

TEST_CASE("resume skips complete shards and redoes stale ones, a rerun is idempotent", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_resume");
  const std::string inputs = q(sample("botchan_head.txt")) + " " + q(sample("botchan_tail.json"));
  const std::string base = "--model " + q(internlm_model()) + " --output-dir " + q(dir / "out") + " " + inputs;
  require_ok(tokenize(base));
  const std::string first = read_all(dir / "out/botchan_head.bin") + read_all(dir / "out/botchan_tail.bin.meta");
  auto again = tokenize(base + " --resume");
  require_ok(again);
  CHECK(again.output.find("botchan_head.bin is complete, skipped (--resume)") != std::string::npos);
  CHECK(again.output.find("botchan_tail.bin is complete, skipped (--resume)") != std::string::npos);
  CHECK(again.output.find("0 files written, 2 skipped (--resume)") != std::string::npos);
  // Another model: the shards are stale and written again.
  auto other = tokenize("--model " + q(sample("spm_2k.model")) + " --output-dir " + q(dir / "out") + " " + inputs + " --resume");
  require_ok(other);
  CHECK(other.output.find("it was written with another model") != std::string::npos);
  CHECK(loom::ShardReader(dir / "out/botchan_head.bin").header().vocab_size == 2000);
  require_ok(tokenize(base));
  CHECK(read_all(dir / "out/botchan_head.bin") + read_all(dir / "out/botchan_tail.bin.meta") == first);
}

namespace {
// Flips one byte of a file in place: same size, other content.
void damage(const std::string& path, size_t at) {
  std::string data = read_all(path);
  REQUIRE(at < data.size());
  data[at] = static_cast<char>(data[at] ^ 0x5a);
  write_all(path, data);
}
}  // namespace

TEST_CASE("resume writes again a damaged shard and one written with other output-changing settings", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_resume_settings");
  write_all(dir / "keys.jsonl", "{\"text\": \"a first text\", \"body\": \"another body\"}\n{\"text\": \"two\", \"body\": \"three\"}\n");
  const std::string txt = q(sample("botchan_head.txt")), jsonl = q(dir / "keys.jsonl");
  const std::string base = "--model " + q(internlm_model()) + " --output-dir " + q(dir / "out") + " --resume " + txt + " " + jsonl;
  const std::string head = dir / "out/botchan_head.bin", keys = dir / "out/keys.bin";
  require_ok(tokenize(base));
  const std::string want_head = read_all(head) + read_all(head + ".meta"), want_keys = read_all(keys) + read_all(keys + ".meta");
  // The header records the XXH64 of the canonical settings text.
  {
    loom::tokenize::TokenizeOptions o;
    o.pipeline.bos = o.pipeline.eos = true;
    const loom::ShardReader r(head);
    const std::string text = loom::tokenize::settings_text(o, sample("botchan_head.txt"), r.tokenizer(), r.header().encoder);
    CHECK(text.find("\ntxt_doc line\n") != std::string::npos);
    CHECK(r.header().settings_xxh64 == loom::xxh64(text.data(), text.size()));
  }
  auto skipped = tokenize(base);
  require_ok(skipped);
  CHECK(skipped.output.find("0 files written, 2 skipped (--resume)") != std::string::npos);
  // --threads and --batch-bytes do not change the output: still skipped.
  auto same = tokenize(base + " --threads 2 --batch-bytes 100");
  require_ok(same);
  CHECK(same.output.find("0 files written, 2 skipped (--resume)") != std::string::npos);

  SECTION("a .bin damaged in place (same size) is tokenized again") {
    damage(head, 1000);
    auto r = tokenize(base);
    require_ok(r);
    CHECK(r.output.find("botchan_head.txt: tokenizing (it is damaged: ") != std::string::npos);
    CHECK(r.output.find("1 file written, 1 skipped (--resume)") != std::string::npos);
    CHECK(read_all(head) + read_all(head + ".meta") == want_head);
  }
  SECTION("a shard that records no settings (an older loom-tokenize) is tokenized again") {
    std::string meta = read_all(head + ".meta");
    meta.replace(88, 8, std::string(8, '\0'));
    write_all(head + ".meta", meta);
    auto r = tokenize(base);
    require_ok(r);
    CHECK(r.output.find("botchan_head.txt: tokenizing (it records no settings") != std::string::npos);
    CHECK(read_all(head) + read_all(head + ".meta") == want_head);
  }
  const std::string other = "it was written with other settings that change the output";
  SECTION("--text-key and --raw-records change json shards only") {
    for (const std::string flag : {"--text-key body", "--raw-records"}) {
      auto r = tokenize(base + " " + flag);
      INFO(flag << "\n" << r.output);
      require_ok(r);
      CHECK(r.output.find("keys.jsonl: tokenizing (" + other) != std::string::npos);
      CHECK(r.output.find("botchan_head.bin is complete, skipped (--resume)") != std::string::npos);
      CHECK(read_all(keys) + read_all(keys + ".meta") != want_keys);
    }
  }
  SECTION("--txt-doc changes txt shards only") {
    auto r = tokenize(base + " --txt-doc paragraph");
    require_ok(r);
    CHECK(r.output.find("botchan_head.txt: tokenizing (" + other) != std::string::npos);
    CHECK(r.output.find("keys.bin is complete, skipped (--resume)") != std::string::npos);
  }
  SECTION("--max-doc-bytes and --encoder change every shard") {
    for (const std::string flag : {"--max-doc-bytes 100", "--encoder sentencepiece"}) {
      auto r = tokenize(base + " " + flag);
      INFO(flag << "\n" << r.output);
      require_ok(r);
      CHECK(r.output.find("botchan_head.txt: tokenizing (" + other) != std::string::npos);
      CHECK(r.output.find("keys.jsonl: tokenizing (" + other) != std::string::npos);
    }
  }
}

TEST_CASE("resume keeps an InternLM shard only when its sidecar record matches", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_resume_internlm");
  const std::string base = "--model " + q(internlm_model()) + " --format internlm --output-dir " + q(dir / "out") +
                           " --resume " + q(sample("botchan_head.txt"));
  const std::string bin = dir / "out/botchan_head.bin", record = bin + ".loom-settings";
  require_ok(tokenize(base));
  const std::string want = read_all(bin) + read_all(bin + ".meta");
  REQUIRE(read_all(record).rfind("loom-tokenize internlm record 1\nsettings_xxh64 ", 0) == 0);
  auto skipped = tokenize(base);
  require_ok(skipped);
  CHECK(skipped.output.find("botchan_head.bin is complete, skipped (--resume)") != std::string::npos);
  SECTION("no record") {
    REQUIRE(std::remove(record.c_str()) == 0);
    auto r = tokenize(base);
    require_ok(r);
    CHECK(r.output.find("tokenizing (it has no record of its settings and checksums") != std::string::npos);
  }
  SECTION("a damaged .bin") {
    damage(bin, 100);
    auto r = tokenize(base);
    require_ok(r);
    CHECK(r.output.find("tokenizing (its files do not match the checksums of") != std::string::npos);
  }
  SECTION("other settings (--bos/--eos, which InternLM's format does not record)") {
    auto r = tokenize(base + " --eos");
    require_ok(r);
    CHECK(r.output.find("tokenizing (it was written with other settings that change the output") != std::string::npos);
    require_ok(tokenize(base));
  }
  CHECK(read_all(bin) + read_all(bin + ".meta") == want);
}

TEST_CASE("a job killed at any point leaves only complete shards, and --resume finishes it identically", "[tokenize][e2e]") {
  TempDir dir("tok_e2e_kill");
  const std::string inputs = q(corpus("botchan.txt")) + " " + q(corpus("wagahaiwa_nekodearu.txt"));
  const std::string m = "--model " + q(internlm_model()) + " --threads 1 ";
  require_ok(tokenize(m + "--output-dir " + q(dir / "clean") + " " + inputs));
  for (const char* delay : {"0.3", "1.2"}) {
    const std::string out = dir / (std::string("k") + delay);
    run("timeout -s KILL " + std::string(delay) + " " + quote(LOOM_TOKENIZE_BIN) + " " + m + "--output-dir " + q(out) + " " + inputs);
    // Whatever exists under a final name is a whole, valid shard.
    for (const std::string name : {"botchan", "wagahaiwa_nekodearu"}) {
      const bool meta = run("test -e " + q(out + "/" + name + ".bin.meta")).exit_code == 0;
      if (meta) CHECK_NOTHROW(loom::ShardReader(out + "/" + name + ".bin").verify_deep());
    }
    require_ok(tokenize(m + "--resume --output-dir " + q(out) + " " + inputs));
    for (const std::string f : {"botchan.bin", "botchan.bin.meta", "wagahaiwa_nekodearu.bin", "wagahaiwa_nekodearu.bin.meta"})
      require_same_file(dir / ("clean/" + f), out + "/" + f);
  }
}
