#include "fixtures.h"

#include <algorithm>
#include <sstream>

#include "loom/dedup/minhash.h"
#include "loom/hash.h"
#include "loom/spm/sentencepiece_model.h"
#include "loom/sys.h"

namespace loom::test {

std::string internlm_model() { return test_data_dir() + "/internlm_v7.model"; }

TokenizerInfo internlm_info() {
  return TokenizerInfo{103168, 1, 2, kShardFlagBos | kShardFlagEos, xxh64_file(internlm_model())};
}

namespace {
const SentencePieceModel& model() {
  static const SentencePieceModel m(internlm_model(), EncoderChoice::kAuto);
  return m;
}
}  // namespace

std::vector<uint32_t> encode(const std::string& text) {
  std::vector<uint32_t> ids;
  model().encode(text, ids);
  return ids;
}

const std::vector<std::string>& botchan_texts() {
  static const std::vector<std::string> texts = [] {
    std::istringstream in(read_all(test_data_dir() + "/botchan.txt"));
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
      if (l.find_first_not_of(" \t\xef\xbb\xbf") != std::string::npos) lines.push_back(l);
    }
    std::vector<std::string> out;
    for (size_t i = 0, k = 0; i < lines.size(); ++k) {
      const size_t m = 1 + (k * 5) % 12;
      std::string text;
      for (size_t j = i; j < std::min(lines.size(), i + m); ++j) text += (j > i ? "\n" : "") + lines[j];
      i += m;
      out.push_back(std::move(text));
    }
    return out;
  }();
  return texts;
}

std::string longest_line(size_t doc) {
  std::string line;
  const std::string& text = botchan_texts()[doc];
  for (size_t s = 0, e; s <= text.size(); s = e + 1) {
    e = std::min(text.find('\n', s), text.size());
    if (e - s > line.size()) line = text.substr(s, e - s);
  }
  return line;
}

const Docs& botchan_docs() {
  static const Docs docs = [] {
    Docs out;
    for (const std::string& text : botchan_texts()) {
      std::vector<uint32_t> doc{1};
      for (uint32_t id : encode(text)) doc.push_back(id);
      doc.push_back(2);
      out.push_back(std::move(doc));
    }
    return out;
  }();
  return docs;
}

void write_shard(const std::string& bin_path, const Docs& docs) {
  sys::make_dirs(sys::dirname(bin_path));
  ShardWriter w(bin_path, internlm_info(), kShardEncoderUnrecorded);
  for (const auto& d : docs) w.add_doc(d);
  w.commit();
}

Docs read_shard(const std::string& bin_path) {
  ShardReader r(bin_path);
  Docs docs(r.num_docs());
  for (uint64_t i = 0; i < r.num_docs(); ++i) r.read_doc(i, docs[i]);
  return docs;
}

std::vector<uint32_t> perturb(const std::vector<uint32_t>& doc, size_t every, size_t offset) {
  std::vector<uint32_t> out = doc;
  for (size_t i = offset; i + 1 < out.size(); i += every) out[i] = 1000 + (out[i] * 7 + i) % 90000;
  return out;
}

double jaccard5(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::vector<uint64_t> sa, sb;
  dedup::shingles(a.data(), a.size(), 5, sa);
  dedup::shingles(b.data(), b.size(), 5, sb);
  return dedup::exact_jaccard(sa, sb);
}

RunResult loom_dedup(const std::string& args) { return run(std::string(LOOM_DEDUP_BIN) + " " + args); }

std::vector<std::string> lines_of(const std::string& path) {
  std::istringstream in(read_all(path));
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace loom::test
