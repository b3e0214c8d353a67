// merge, split, convert, stats and head end to end, each against an independent Python reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <sstream>

#include "fixtures.h"
#include "loom/error.h"
#include "loom/sys.h"

using namespace loom;
using namespace loom::test;

namespace {

Docs random_docs(uint64_t seed, size_t n, uint32_t vocab) {
  std::mt19937_64 rng(seed);
  Docs docs(n);
  for (auto& d : docs) {
    d.resize(rng() % 40);
    for (auto& id : d) id = static_cast<uint32_t>(rng() % vocab);
  }
  return docs;
}

Docs concat(const std::vector<Docs>& parts) {
  Docs out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Documents as text, one per line, for comparing with Python's view.
std::string docs_text(const Docs& docs) {
  std::ostringstream os;
  for (const auto& d : docs) {
    for (size_t i = 0; i < d.size(); ++i) os << (i ? " " : "") << d[i];
    os << "\n";
  }
  return os.str();
}

// Files in a folder (names only, sorted); "" when it does not exist.
std::string list_dir(const std::string& dir) { return run("(ls -A " + quote(dir) + " 2>/dev/null)").output; }

// What a command printed on stdout, without the log lines (they carry the time).
std::string without_log(const std::string& output) {
  std::istringstream in(output);
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("[loom ", 0) != 0) out += line + "\n";
  return out;
}

bool is_subsequence(const Docs& sub, const Docs& all) {
  size_t j = 0;
  for (size_t i = 0; i < all.size() && j < sub.size(); ++i) j += all[i] == sub[j];
  return j == sub.size();
}

// Python's split: valid documents by XXH64(seed u64 LE, doc u64 LE) (fraction or the k smallest).
std::string py_valid_docs(uint64_t seed, size_t n, const std::string& rule) {
  RunResult r = run(python() + " -c " +
                    quote("import struct, sys, xxhash\n"
                          "seed, n, rule = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
                          "s = [(xxhash.xxh64(struct.pack('<QQ', seed, d)).intdigest(), d) for d in range(n)]\n"
                          "if rule.startswith('f'): v = [d for h, d in s if h < float(rule[1:]) * 2**64]\n"
                          "else: v = sorted(d for h, d in sorted(s)[:int(rule[1:])])\n"
                          "print(' '.join(map(str, v)))") +
                    " " + std::to_string(seed) + " " + std::to_string(n) + " " + rule);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// `loom-pack head -n N --model internlm_v7.model SHARD`, its stdout only (the configuration is
// logged on stderr).
RunResult head_stdout(uint64_t n, const std::string& shard) {
  return run("(" + std::string(LOOM_PACK_BIN) + " head -n " + std::to_string(n) + " --model " + quote(internlm_model()) +
             " " + quote(shard) + " 2>/dev/null)");
}

// What Python prints for `body`, run with `sys`, `sp` (python sentencepiece with internlm_v7.model)
// and `path` defined.
std::string py_decoded(const std::string& body, const std::string& path) {
  RunResult r = run(python() + " -c " +
                    quote("import sys, numpy as np, sentencepiece as spm\n"
                          "sp = spm.SentencePieceProcessor(model_file=sys.argv[1]); path = sys.argv[2]\n" + body) +
                    " " + quote(internlm_model()) + " " + quote(path));
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// `convert --to loom --model internlm_v7` of dir/converted into dir/l gives back dir/a.bin's bytes,
// .bin and .meta.
void check_converts_back(const TempDir& dir, const std::string& converted) {
  RunResult back = loom_pack("convert --to loom --model " + quote(internlm_model()) + " --output-dir " + quote(dir / "l") +
                             " " + quote(dir / converted));
  INFO(back.output);
  REQUIRE(back.exit_code == 0);
  CHECK(read_all(dir / "l/a.bin") == read_all(dir / "a.bin"));
  CHECK(read_all(dir / "l/a.bin.meta") == read_all(dir / "a.bin.meta"));
}

}  // namespace

TEST_CASE("merge then split then merge round-trips, and split matches the documented hash rule") {
  TempDir dir("tools");
  const TokenizerInfo info{500, 1, 2, 0, 0x77};
  const std::vector<Docs> parts = {random_docs(1, 30, 500), random_docs(2, 45, 500), random_docs(3, 25, 500)};
  for (size_t i = 0; i < parts.size(); ++i) write_shard(dir / ("in/p" + std::to_string(i) + ".bin"), parts[i], info);
  RunResult m = loom_pack("merge --output " + quote(dir / "m/all.bin") + " " + quote(dir / "in"));
  INFO(m.output);
  REQUIRE(m.exit_code == 0);
  const Docs all = concat(parts);
  CHECK(read_shard(dir / "m/all.bin") == all);

  RunResult s = loom_pack("split --valid-fraction 0.3 --seed 5 --output-dir " + quote(dir / "s") + " " + quote(dir / "m/all.bin"));
  INFO(s.output);
  REQUIRE(s.exit_code == 0);
  const Docs train = read_shard(dir / "s/train/all.bin"), valid = read_shard(dir / "s/valid/all.bin");
  CHECK(train.size() + valid.size() == all.size());
  CHECK(is_subsequence(train, all));
  CHECK(is_subsequence(valid, all));
  // The valid side is exactly the documents the Python rule picks (documents here are distinct).
  std::ostringstream want_valid;
  const std::string picked = py_valid_docs(5, all.size(), "f0.3");
  std::istringstream ps(picked);
  Docs expect_valid;
  for (size_t d; ps >> d;) expect_valid.push_back(all[d]);
  CHECK(valid == expect_valid);
  CHECK(!valid.empty());

  REQUIRE(loom_pack("merge --output " + quote(dir / "m2/all.bin") + " " + quote(dir / "s/train/all.bin") + " " +
                    quote(dir / "s/valid/all.bin"))
              .exit_code == 0);
  Docs back = read_shard(dir / "m2/all.bin"), sorted_all = all;
  std::sort(back.begin(), back.end());
  std::sort(sorted_all.begin(), sorted_all.end());
  CHECK(back == sorted_all);

  // Stable across runs; --valid-docs takes the N smallest scores.
  const std::string train_bytes = read_all(dir / "s/train/all.bin.meta");
  REQUIRE(loom_pack("split --valid-fraction 0.3 --seed 5 --output-dir " + quote(dir / "s") + " " + quote(dir / "m/all.bin")).exit_code == 0);
  CHECK(read_all(dir / "s/train/all.bin.meta") == train_bytes);
  REQUIRE(loom_pack("split --valid-docs 7 --seed 9 --output-dir " + quote(dir / "k") + " " + quote(dir / "m/all.bin")).exit_code == 0);
  std::istringstream ks(py_valid_docs(9, all.size(), "k7"));
  Docs expect_k;
  for (size_t d; ks >> d;) expect_k.push_back(all[d]);
  CHECK(read_shard(dir / "k/valid/all.bin") == expect_k);
  CHECK(expect_k.size() == 7);
  CHECK(loom_pack("split --seed 9 --output-dir " + quote(dir / "k") + " " + quote(dir / "m/all.bin")).exit_code == 2);
}

// --min-valid-docs: a small input at a small fraction gets the documents nearest the cut (the k
// smallest scores, as --valid-docs k); one that reached the minimum is split as without it; train
// always keeps a document.
TEST_CASE("split --min-valid-docs gives a small input a valid side and leaves a larger one as it was") {
  TempDir dir("tools");
  const TokenizerInfo info{500, 1, 2, 0, 0x77};
  const Docs small = random_docs(4, 12, 500), large = random_docs(5, 400, 500);
  write_shard(dir / "in/small.bin", small, info);
  write_shard(dir / "in/large.bin", large, info);
  const auto picked = [&](uint64_t seed, const Docs& docs, const std::string& rule) {
    std::istringstream ps(py_valid_docs(seed, docs.size(), rule));
    Docs out;
    for (size_t d; ps >> d;) out.push_back(docs[d]);
    return out;
  };
  // Seed 1 at 1% gives the 12 documents no valid one: the minimum of 3 takes the 3 smallest scores.
  REQUIRE(picked(1, small, "f0.01").empty());
  RunResult r = loom_pack("split --valid-fraction 0.01 --min-valid-docs 3 --seed 1 --output-dir " + quote(dir / "s") +
                          " " + quote(dir / "in/small.bin"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(read_shard(dir / "s/valid/small.bin") == picked(1, small, "k3"));
  CHECK(read_shard(dir / "s/train/small.bin").size() == 9);
  // A minimum above the input's documents leaves train one.
  REQUIRE(loom_pack("split --valid-fraction 0 --min-valid-docs 100 --seed 1 --output-dir " + quote(dir / "all") + " " +
                    quote(dir / "in/small.bin"))
              .exit_code == 0);
  CHECK(read_shard(dir / "all/valid/small.bin") == picked(1, small, "k11"));
  CHECK(read_shard(dir / "all/train/small.bin").size() == 1);
  // 400 documents at 5% reach the minimum by themselves: the same bytes as without the flag.
  REQUIRE(picked(1, large, "f0.05").size() >= 3);
  REQUIRE(loom_pack("split --valid-fraction 0.05 --seed 1 --output-dir " + quote(dir / "a") + " " +
                    quote(dir / "in/large.bin"))
              .exit_code == 0);
  REQUIRE(loom_pack("split --valid-fraction 0.05 --min-valid-docs 3 --seed 1 --output-dir " + quote(dir / "b") + " " +
                    quote(dir / "in/large.bin"))
              .exit_code == 0);
  CHECK(read_all(dir / "a/valid/large.bin") == read_all(dir / "b/valid/large.bin"));
  CHECK(read_all(dir / "a/train/large.bin.meta") == read_all(dir / "b/train/large.bin.meta"));
  CHECK(read_shard(dir / "b/valid/large.bin") == picked(1, large, "f0.05"));
  // Only with a fraction.
  const RunResult bad = loom_pack("split --valid-docs 2 --min-valid-docs 3 --output-dir " + quote(dir / "c") + " " +
                                  quote(dir / "in/small.bin"));
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("--min-valid-docs goes with --valid-fraction") != std::string::npos);
}

TEST_CASE("merge refuses other tokenizers, dtypes and bos/eos, and corrupt inputs, writing nothing") {
  TempDir dir("tools");
  const TokenizerInfo info{500, 1, 2, 0, 0x77};
  write_shard(dir / "a.bin", {{1, 2}}, info);
  auto refused = [&](const TokenizerInfo& other, const std::string& what) {
    write_shard(dir / "b.bin", {{3}}, other);
    RunResult r = loom_pack("merge --output " + quote(dir / "o.bin") + " " + quote(dir / "a.bin") + " " + quote(dir / "b.bin"));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains("ERROR loom-pack merge: " + dir / "b.bin: tokenizer differs from " + dir / "a.bin: " +
                                         what + "; only shards of one tokenizer go together\n"));
    CHECK(!sys::exists(dir / "o.bin"));
  };
  refused(TokenizerInfo{500, 1, 2, 0, 0x78}, "model_fingerprint 0000000000000078 vs 0000000000000077");
  refused(TokenizerInfo{70000, 1, 2, 0, 0x77}, "vocab_size 70000 vs 500, dtype_bytes 4 vs 2");
  refused(TokenizerInfo{500, 0, 2, 0, 0x77}, "bos_id 0 vs 1");
  refused(TokenizerInfo{500, 1, 3, 0, 0x77}, "eos_id 3 vs 2");
  refused(TokenizerInfo{500, 1, 2, kShardFlagBos, 0x77}, "flags 1 (bos) vs 0 (none)");
  refused(TokenizerInfo{501, -1, 2, kShardFlagEos, 0x79},
          "vocab_size 501 vs 500, bos_id -1 vs 1, flags 2 (eos) vs 0 (none), model_fingerprint 0000000000000079 vs "
          "0000000000000077");
  write_shard(dir / "b.bin", {{3, 4}}, info);
  std::string bytes = read_all(dir / "b.bin");
  bytes[0] = 5;
  write_all(dir / "b.bin", bytes);
  RunResult r = loom_pack("merge --output " + quote(dir / "o.bin") + " " + quote(dir / "a.bin") + " " + quote(dir / "b.bin"));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains(dir / "b.bin: checksum mismatch"));
  CHECK(sys::list_files(dir.path()).size() == 4);  // a.bin, b.bin and their .meta: nothing else
}

TEST_CASE("convert loom to internlm to loom is lossless on botchan with internlm_v7") {
  TempDir dir("tools");
  const Docs& docs = botchan_docs();
  write_shard(dir / "a.bin", docs, internlm_info());
  REQUIRE(loom_pack("convert --to internlm --output-dir " + quote(dir / "i") + " " + quote(dir / "a.bin")).exit_code == 0);
  // InternLM's own writer would produce these bytes: json.dumps per line and np.save of (offset, count).
  write_all(dir / "docs.txt", docs_text(docs));
  RunResult py = run(python() + " -c " +
                     quote("import json, sys, io, numpy as np\n"
                           "docs = [[int(x) for x in l.split()] for l in open(sys.argv[1]).read().split('\\n')[:-1]]\n"
                           "lines = [(json.dumps({'tokens': d}) + '\\n').encode() for d in docs]\n"
                           "offs = np.cumsum([0] + [len(l) for l in lines[:-1]])\n"
                           "meta = io.BytesIO(); np.save(meta, np.array([offs, [len(d) for d in docs]], dtype='<i4').T.copy())\n"
                           "ok = open(sys.argv[2], 'rb').read() == b''.join(lines) and open(sys.argv[2] + '.meta', 'rb').read() == meta.getvalue()\n"
                           "print(len(docs), ok)") +
                     " " + quote(dir / "docs.txt") + " " + quote(dir / "i/a.bin"));
  CHECK(py.output == str(docs.size(), " True\n"));
  check_converts_back(dir, "i/a.bin");
  CHECK(loom_pack("convert --to loom --output-dir " + quote(dir / "x") + " " + quote(dir / "a.bin")).exit_code == 1);
  CHECK(loom_pack("convert --to parquet --output-dir " + quote(dir / "x") + " " + quote(dir / "a.bin")).exit_code == 2);
}

TEST_CASE("convert loom to Megatron to loom is lossless on botchan with internlm_v7, and checks the input") {
  TempDir dir("tools_megatron");
  Docs docs = botchan_docs();
  docs.insert(docs.begin() + 3, std::vector<uint32_t>{});  // an empty document: a document of no sequence
  write_shard(dir / "a.bin", docs, internlm_info());
  RunResult to = loom_pack("convert --to megatron --output-dir " + quote(dir / "m") + " " + quote(dir / "a.bin"));
  INFO(to.output);
  REQUIRE(to.exit_code == 0);
  CHECK(list_dir(dir / "m") == "a.bin\na.idx\n");
  // IndexedDatasetBuilder's bytes, by numpy: 103168 pieces is not below 65500, so int32 (code 4);
  // one sequence per document with ids, document_indices from 0.
  write_all(dir / "docs.txt", docs_text(docs));
  RunResult py = run(python() + " -c " +
                     quote("import struct, sys, numpy as np\n"
                           "docs = [[int(x) for x in l.split()] for l in open(sys.argv[1]).read().split('\\n')[:-1]]\n"
                           "lens = [len(d) for d in docs if d]\n"
                           "index = np.cumsum([0] + [1 if d else 0 for d in docs])\n"
                           "ptrs = np.cumsum([0] + lens[:-1]) * 4\n"
                           "idx = b'MMIDIDX\\x00\\x00' + struct.pack('<QBQQ', 1, 4, len(lens), len(index))\n"
                           "idx += np.array(lens, np.int32).tobytes() + np.array(ptrs, np.int64).tobytes() + np.array(index, np.int64).tobytes()\n"
                           "bin = np.array(sum(docs, []), np.int32).tobytes()\n"
                           "print(len(docs), open(sys.argv[2] + '.idx', 'rb').read() == idx, open(sys.argv[2] + '.bin', 'rb').read() == bin)") +
                     " " + quote(dir / "docs.txt") + " " + quote(dir / "m/a"));
  CHECK(py.output == str(docs.size(), " True True\n"));
  check_converts_back(dir, "m/a.bin");
  // stats and head read the dataset as they read the shard.
  RunResult stats = loom_pack("stats " + quote(dir / "m/a"));  // Megatron's name of it, the prefix
  CHECK_THAT(stats.output, Catch::Contains(dir / "m/a.bin: megatron, int32, " + str(docs.size()) + " documents"));
  const std::string head_args = "head -n 4 --model " + quote(internlm_model()) + " ";
  const std::string head = without_log(loom_pack(head_args + quote(dir / "a.bin")).output);
  CHECK_THAT(head, Catch::Contains("== document 3 (0 tokens) =="));
  CHECK(without_log(loom_pack(head_args + quote(dir / "m/a.bin")).output) == head);
  // pack reads the dataset through its loom conversion: the packs of the loom original.
  const std::string pack_args = "pack --seq-len 512 --strategy bestfit --seed 3 --model " + quote(internlm_model());
  REQUIRE(loom_pack(pack_args + " --output-dir " + quote(dir / "p1") + " " + quote(dir / "a.bin")).exit_code == 0);
  RunResult packed = loom_pack(pack_args + " --output-dir " + quote(dir / "p2") + " " + quote(dir / "m/a.bin"));
  INFO(packed.output);
  REQUIRE(packed.exit_code == 0);
  CHECK_THAT(packed.output, Catch::Contains("1 Megatron-LM dataset(s) read through their loom conversion"));
  CHECK(read_all(dir / "p2/packed.bin") == read_all(dir / "p1/packed.bin"));
  CHECK(read_all(dir / "p2/packed.bin.meta") == read_all(dir / "p1/packed.bin.meta"));
  // A loom input whose .bin no longer matches its checksum: refused, and nothing is written.
  std::string bad = read_all(dir / "a.bin");
  bad[8] = static_cast<char>(bad[8] ^ 1);  // token 2, inside document 0, still < vocab: only the checksum tells
  run("mkdir -p " + quote(dir / "bad"));
  write_all(dir / "bad/b.bin", bad);
  write_all(dir / "bad/b.bin.meta", read_all(dir / "a.bin.meta"));
  RunResult refused = loom_pack("convert --to megatron --output-dir " + quote(dir / "out") + " " + quote(dir / "bad/b.bin"));
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.output, Catch::Contains("checksum"));
  CHECK(list_dir(dir / "out") == "");
  // Megatron to InternLM is not a conversion; the reason names it.
  RunResult wrong = loom_pack("convert --to internlm --output-dir " + quote(dir / "x") + " " + quote(dir / "m/a.bin"));
  CHECK(wrong.exit_code == 1);
  CHECK_THAT(wrong.output, Catch::Contains("is a megatron shard; --to internlm converts loom token shards"));
}

TEST_CASE("stats --json agrees with numpy on botchan, and reports packs and padding") {
  TempDir dir("tools");
  const Docs& docs = botchan_docs();
  write_shard(dir / "a.bin", docs, internlm_info());
  RunResult s = loom_pack("stats --json " + quote(dir / "a.bin"));
  REQUIRE(s.exit_code == 0);
  write_all(dir / "stats.json", s.output.substr(s.output.find('{')));
  write_all(dir / "docs.txt", docs_text(docs));
  RunResult py = run(python() + " -c " +
                     quote("import json, sys, math, numpy as np, xxhash\n"
                           "st = json.load(open(sys.argv[1]))\n"
                           "lens = sorted(len(l.split()) for l in open(sys.argv[2]).read().split('\\n')[:-1])\n"
                           "n = len(lens)\n"
                           "want = dict(documents=n, tokens=sum(lens), min=lens[0], max=lens[-1], median=lens[(n - 1) // 2],\n"
                           "            p99=lens[math.ceil(0.99 * n) - 1], dtype='uint32',\n"
                           "            fingerprint='%016x' % xxhash.xxh64(open(sys.argv[3], 'rb').read()).intdigest())\n"
                           "bad = {k: (st.get(k), v) for k, v in want.items() if st.get(k) != v}\n"
                           "hist = sum(b['count'] for b in st['histogram']) == n and all(b['min'] <= b['max'] for b in st['histogram'])\n"
                           "print('ok' if not bad and hist and 'packs' not in st else bad)") +
                     " " + quote(dir / "stats.json") + " " + quote(dir / "docs.txt") + " " + quote(internlm_model()));
  CHECK(py.output == "ok\n");

  write_shard(dir / "t/b.bin", {{1, 2, 3}, {4, 5, 6, 7, 8}, {9}}, TokenizerInfo{10, -1, -1, 0, 0});
  REQUIRE(loom_pack("pack --seq-len 4 --strategy bestfit --output-dir " + quote(dir / "p") + " " + quote(dir / "t/b.bin")).exit_code == 0);
  RunResult p = loom_pack("stats --json " + quote(dir / "p"));
  REQUIRE(p.exit_code == 0);
  // chunks 4 | 3+1 | 1 -> 3 packs of 4, 9 tokens, 3 padding; segment lengths 4, 3, 1, 1.
  CHECK_THAT(p.output, Catch::Contains("{\"files\": 1, \"documents\": 3, \"tokens\": 9, \"min\": 1, \"median\": 1, \"p99\": 4, "
                                       "\"max\": 4, \"histogram\": [{\"min\": 1, \"max\": 1, \"count\": 2}, {\"min\": 2, "
                                       "\"max\": 3, \"count\": 1}, {\"min\": 4, \"max\": 7, \"count\": 1}], \"dtype\": "
                                       "\"uint16\", \"fingerprint\": \"0000000000000000\", \"packs\": 3, \"padding_tokens\": 3"));
}

TEST_CASE("head decodes the first documents as python sentencepiece does") {
  TempDir dir("tools");
  const Docs& docs = botchan_docs();
  write_shard(dir / "a.bin", Docs(docs.begin(), docs.begin() + 5), internlm_info());
  RunResult h = head_stdout(3, dir / "a.bin");
  REQUIRE(h.exit_code == 0);
  write_all(dir / "docs.txt", docs_text(Docs(docs.begin(), docs.begin() + 3)));
  CHECK(h.output == py_decoded("for i, l in enumerate(open(path).read().split('\\n')[:-1]):\n"
                               "    ids = [int(x) for x in l.split()]\n"
                               "    sys.stdout.write('== document %d (%d tokens) ==\\n%s\\n' % (i, len(ids), sp.decode(ids)))\n",
                               dir / "docs.txt"));
  CHECK_THAT(h.output, Catch::StartsWith("== document 0 ("));
}

TEST_CASE("head decodes the segments of a packed shard's first packs") {
  TempDir dir("tools");
  const Docs& docs = botchan_docs();
  write_shard(dir / "a.bin", Docs(docs.begin(), docs.begin() + 6), internlm_info());
  REQUIRE(loom_pack("pack --seq-len 300 --strategy concat --output-dir " + quote(dir / "p") + " " + quote(dir / "a.bin")).exit_code == 0);
  RunResult h = head_stdout(2, dir / "p/packed.bin");
  REQUIRE(h.exit_code == 0);
  // The numpy reader of docs/FORMAT.md and python sentencepiece, independently.
  const std::string py = py_decoded(
      "b = path\n"
      "h = np.fromfile(b + '.meta', dtype=np.uint8, count=128)\n"
      "seq_len = int(h[8:48].view('<u4')[7]); n = int(h[48:56].view('<u8')[0])\n"
      "meta = np.fromfile(b + '.meta', dtype=np.uint8, offset=128)\n"
      "so = meta[:8 * (n + 1)].view('<u8')\n"
      "seg = meta[8 * (n + 1):].view(np.dtype([('doc', '<u8'), ('start', '<u4'), ('length', '<u4'), ('doc_pos', '<u4'), ('f', '<u4')]))\n"
      "packs = np.fromfile(b, dtype='<u4').reshape(n, seq_len)\n"
      "for p in range(2):\n"
      "    for i, s in enumerate(seg[so[p]:so[p + 1]]):\n"
      "        ids = packs[p][s['start']:s['start'] + s['length']].tolist()\n"
      "        sys.stdout.write('== pack %d segment %d: document %d, tokens [%d, %d)%s ==\\n%s\\n' % (p, i, s['doc'],\n"
      "            s['doc_pos'], s['doc_pos'] + s['length'], ', ends document' if s['f'] & 1 else '', sp.decode(ids)))\n",
      dir / "p/packed.bin");
  CHECK(h.output == py);
  CHECK_THAT(h.output, Catch::StartsWith("== pack 0 segment 0: document 0, tokens [0, "));
  CHECK_THAT(h.output, Catch::Contains("== pack 1 segment 0: document "));
}

TEST_CASE("every subcommand follows the shared exit codes, with one 'loom-pack SUB: message' line") {
  TempDir dir("tools");
  write_shard(dir / "a.bin", {{1, 2}}, TokenizerInfo{10, -1, -1, 0, 0});
  const std::string table = "Exit codes: 0 ok, 1 bad input or failed check, 2 usage error, 3 internal error, 4 hang";
  RunResult top = loom_pack("--help");
  CHECK(top.exit_code == 0);
  CHECK_THAT(top.output, Catch::Contains("\n" + table));
  CHECK(loom_pack("").exit_code == 2);
  RunResult unknown = loom_pack("frobnicate");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.output, Catch::Contains("ERROR loom-pack: unknown subcommand 'frobnicate'"));
  for (const char* sub : {"verify", "stats", "head", "merge", "split", "convert", "pack"}) {
    const std::string s = sub;
    INFO(s);
    RunResult help = loom_pack(s + " --help");
    CHECK(help.exit_code == 0);
    CHECK_THAT(help.output, Catch::Contains("\n" + table));
    // No Boost (=0)/(=1) for a boolean: loom-pack's are switches (no default shown; a valued bool
    // would show (=true)/(=false) through loom::value_with_default, as in loom-train and train-spm).
    for (const char* flag : {"\n  --json ", "\n  --deep "}) {
      const size_t at = help.output.find(flag);
      if (at != std::string::npos)
        CHECK(help.output.substr(at, help.output.find('\n', at) - at).find("(=") == std::string::npos);
    }
    RunResult bad_option = loom_pack(s + " --no-such-flag " + quote(dir / "a.bin"));
    CHECK(bad_option.exit_code == 2);
    CHECK_THAT(bad_option.output,
               Catch::Contains("ERROR loom-pack " + s + ": unrecognised option '--no-such-flag' (see loom-pack " + s +
                               " --help)\n"));
    RunResult no_config = loom_pack(s + " --config " + quote(dir / "none.ini") + " " + quote(dir / "a.bin"));
    CHECK(no_config.exit_code == 2);
    CHECK_THAT(no_config.output, Catch::Contains("ERROR loom-pack " + s + ": cannot read config file " + dir / "none.ini\n"));
  }
  // Numeric options: a range checked before any work, "-1" never read as 2^64-1.
  const std::string a_bin = quote(dir / "a.bin"), out = " --output-dir " + quote(dir / "o") + " ";
  const std::pair<std::string, std::string> numeric[] = {
      {"pack --seq-len -1" + out + a_bin, "--seq-len: '-1' is not an integer in [1, 16777216]"},
      {"pack --seq-len 0" + out + a_bin, "--seq-len: '0' is not an integer in [1, 16777216]"},
      {"pack --seq-len 4294967295" + out + a_bin, "--seq-len: '4294967295' is not an integer in [1, 16777216]"},
      {"pack --seq-len 8 --seed -1" + out + a_bin, "--seed: '-1' is not an integer in [0, 18446744073709551615]"},
      {"pack --seq-len 8 --max-packs-per-shard -1" + out + a_bin,
       "--max-packs-per-shard: '-1' is not an integer in [0, 9223372036854775807]"},
      {"head --model m.model -n -1 " + a_bin, "--n: '-1' is not an integer in [0, 9223372036854775807]"},
      {"split --valid-docs -1" + out + a_bin, "--valid-docs: '-1' is not an integer in [0, 9223372036854775807]"},
      {"split --valid-fraction 2" + out + a_bin, "--valid-fraction: '2' is not a number in [0, 1]"},
      {"split --valid-docs 1 --seed -1" + out + a_bin, "--seed: '-1' is not an integer in [0, 18446744073709551615]"},
      {"convert --to loom --vocab-size -1" + out + a_bin, "--vocab-size: '-1' is not an integer in [0, 4294967295]"},
      {"verify --deep --vocab-size -1 " + a_bin, "--vocab-size: '-1' is not an integer in [0, 4294967295]"},
  };
  for (const auto& [cmd, message] : numeric) {
    RunResult r = loom_pack(cmd);
    INFO(cmd << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("ERROR loom-pack " + cmd.substr(0, cmd.find(' ')) + ": " + message));
  }
  CHECK_FALSE(sys::exists(dir / "o"));
  // Bad input: 1, the message naming the file.
  RunResult missing = loom_pack("stats " + quote(dir / "missing.bin"));
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.output, Catch::Contains("ERROR loom-pack stats: " + dir / "missing.bin: no such file or folder"));
}
