#include "fixtures.h"

#include <sstream>
#include <stdexcept>

#include "loom/hash.h"
#include "loom/sys.h"

namespace loom::test {

void write_shard(const std::string& bin_path, const Docs& docs, const TokenizerInfo& info) {
  sys::make_dirs(sys::dirname(bin_path));
  ShardWriter w(bin_path, info);
  for (const auto& d : docs) w.add_doc(d);
  w.commit();
}

Docs read_shard(const std::string& bin_path) {
  ShardReader r(bin_path);
  Docs docs(r.num_docs());
  for (uint64_t i = 0; i < r.num_docs(); ++i) r.read_doc(i, docs[i]);
  return docs;
}

std::string internlm_model() { return test_data_dir() + "/internlm_v7.model"; }

TokenizerInfo internlm_info() {
  return TokenizerInfo{103168, 1, 2, kShardFlagBos | kShardFlagEos, xxh64_file(internlm_model())};
}

const Docs& botchan_docs() {
  static const Docs docs = [] {
    TempDir dir("botchan");
    write_all(dir / "enc.py",
              "import sentencepiece as spm, sys\n"
              "sp = spm.SentencePieceProcessor(model_file=sys.argv[1])\n"
              "text = open(sys.argv[2], encoding='utf-8-sig').read()\n"
              "lines = [l for l in text.split('\\n') if l.strip()]\n"
              "paras, k = [], 0\n"
              "while lines:\n"
              "    m = 1 + (k * 37) % 60; k += 1\n"
              "    paras.append('\\n'.join(lines[:m])); lines = lines[m:]\n"
              "with open(sys.argv[3], 'w') as f:\n"
              "    for p in paras:\n"
              "        f.write(' '.join(map(str, [sp.bos_id()] + sp.encode(p) + [sp.eos_id()])) + '\\n')\n");
    RunResult r = run(python() + " " + quote(dir / "enc.py") + " " + quote(internlm_model()) + " " +
                      quote(test_data_dir() + "/botchan.txt") + " " + quote(dir / "ids.txt"));
    if (r.exit_code != 0) throw std::runtime_error("encoding botchan failed: " + r.output);
    Docs out;
    std::istringstream in(read_all(dir / "ids.txt"));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      out.emplace_back();
      uint32_t id;
      while (ls >> id) out.back().push_back(id);
    }
    return out;
  }();
  return docs;
}

RunResult loom_pack(const std::string& args) { return run(std::string(LOOM_PACK_BIN) + " " + args); }

std::string py_xxh64_hex(const std::string& path) {
  RunResult r = run(python() + " -c " +
                    quote("import sys, xxhash; print('%016x' % xxhash.xxh64(open(sys.argv[1], 'rb').read()).intdigest(), end='')") +
                    " " + quote(path));
  if (r.exit_code != 0) throw std::runtime_error("xxhash failed: " + r.output);
  return r.output;
}

}  // namespace loom::test
