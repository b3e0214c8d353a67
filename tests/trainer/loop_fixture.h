// Test data for the loop's tests: small packed shards written with loom::PackedWriter (the
// packer's writer), in one sub-folder per named dataset, and a config built through the real
// option parser.
#pragma once

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "config.h"
#include "loom/packed_format.h"
#include "loom/sys.h"
#include "test_util.h"

namespace loom::test {

constexpr uint32_t kLoopVocab = 48;
constexpr uint32_t kLoopSeqLen = 16;

// Each pack holds two documents whose tokens follow t[i+1] = (5 t[i] + 3) % V (learnable), the
// second cut short so the pack has padding.
inline void write_loop_dataset(const std::string& dir, uint64_t seed, int packs, uint64_t fingerprint = 0) {
  sys::make_dirs(dir);
  TokenizerInfo info;
  info.model_fingerprint = fingerprint;
  info.vocab_size = kLoopVocab;
  info.bos_id = 1;
  info.eos_id = 2;
  PackedWriter w(dir + "/part0.bin", info, kLoopSeqLen, PackStrategy::kConcat, seed);
  for (int p = 0; p < packs; ++p) {
    std::vector<uint32_t> tokens;
    uint32_t t = static_cast<uint32_t>((seed * 7 + static_cast<uint64_t>(p) * 11) % kLoopVocab);
    const uint32_t len0 = 6 + static_cast<uint32_t>(p % 4), len1 = kLoopSeqLen - len0 - 2;
    for (uint32_t i = 0; i < len0 + len1; ++i) {
      tokens.push_back(t);
      t = (5 * t + 3) % kLoopVocab;
    }
    std::vector<PackedSegment> segs = {{static_cast<uint64_t>(2 * p), 0, len0, 0, kSegEndsDoc},
                                       {static_cast<uint64_t>(2 * p + 1), len0, len1, 0, kSegEndsDoc}};
    w.add_pack(tokens, segs);
  }
  w.commit(static_cast<uint64_t>(2 * packs));
}

// train/{alpha,beta} and valid/{alpha} under root.
// fingerprint: the shards' tokenizer fingerprint (XXH64 of a .model file; 0 = none recorded).
inline void write_loop_data(const std::string& root, uint64_t fingerprint = 0) {
  write_loop_dataset(root + "/train/alpha", 1, 24, fingerprint);
  write_loop_dataset(root + "/train/beta", 2, 16, fingerprint);
  write_loop_dataset(root + "/valid/alpha", 3, 4, fingerprint);
}

// A tiny model on that data; extra args override.
inline std::vector<std::string> loop_args(const std::string& data_root, const std::string& run_dir,
                                          std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {
      "--job.run_dir=" + run_dir, "--data.train_folder=" + data_root + "/train",
      "--data.valid_folder=" + data_root + "/valid", "--data.seq_len=16", "--data.micro_bsz=2",
      "--data.micro_num=2", "--data.total_steps=6", "--model.hidden_size=32", "--model.num_layers=2",
      "--model.num_attention_heads=4", "--model.vocab_size=48", "--adam.lr=0.01",
      "--lr_scheduler.warmup_ratio=0.34", "--job.threads=1", "--job.seed=7", "--model.dropout=0.1"};
  // An extra "--key=value" replaces the base value of that key (options may be given once).
  for (auto& e : extra) {
    const std::string key = e.substr(0, e.find('='));
    for (auto it = a.begin(); it != a.end();) it = it->rfind(key + "=", 0) == 0 ? a.erase(it) : it + 1;
    a.push_back(std::move(e));
  }
  return a;
}

inline TrainConfig loop_config(const std::string& data_root, const std::string& run_dir,
                               std::vector<std::string> extra = {}) {
  auto c = parse_train_config(loop_args(data_root, run_dir, std::move(extra)));
  return *c;
}

// metrics.jsonl readers. The value text of key in one JSON line as written (exact digits), or
// "<no KEY>" when the line lacks it.
inline std::string json_field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\": ";
  const size_t at = line.find(k);
  if (at == std::string::npos) return "<no " + key + ">";
  const size_t end = line.find_first_of(",}", at + k.size());
  return line.substr(at + k.size(), end - at - k.size());
}

// The lines that carry a training loss (validation lines have no "loss" key).
inline std::vector<std::string> train_lines(const std::string& metrics_path) {
  std::vector<std::string> out;
  std::istringstream in(read_all(metrics_path));
  for (std::string line; std::getline(in, line);)
    if (line.find("\"loss\": ") != std::string::npos) out.push_back(line);
  return out;
}

// step -> the value text of key, over the lines that have it.
inline std::map<int64_t, std::string> metric_text(const std::string& metrics_path, const std::string& key) {
  std::map<int64_t, std::string> m;
  std::istringstream in(read_all(metrics_path));
  for (std::string line; std::getline(in, line);)
    if (line.find("\"" + key + "\": ") != std::string::npos) m[std::stoll(json_field(line, "step"))] = json_field(line, key);
  return m;
}

}  // namespace loom::test
