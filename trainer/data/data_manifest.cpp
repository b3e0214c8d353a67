#include "data_manifest.h"

#include <simdjson.h>

#include <map>
#include <set>
#include <sstream>

#include "loom/error.h"
#include "loom/hash.h"
#include "loom/json_text.h"

namespace loom {

namespace {

// hex64's text back (loom/hash.h writes it).
uint64_t unhex(std::string_view s, const std::string& where) {
  LOOM_CHECK(s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos, where,
             ": '", s, "' is not a 16-digit hex checksum");
  return std::stoull(std::string(s), nullptr, 16);
}

std::string file_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

}  // namespace

DataManifest manifest_of(const TrainData& data, int64_t seq_len) {
  DataManifest m;
  m.seq_len = seq_len;
  m.tokenizer = data.tokenizer();
  m.mixture = mixture_name(data.mixture());
  for (const PackedDataset& d : data.datasets()) {
    DataManifest::Dataset ds{d.name(), d.weight(), {}};
    for (size_t i = 0; i < d.num_shards(); ++i) {
      const PackedReader& r = d.shard(i);
      ds.shards.push_back({file_name(r.bin_path()), r.header().num_packs, r.header().bin_xxh64});
    }
    m.datasets.push_back(std::move(ds));
  }
  return m;
}

std::string DataManifest::to_json() const {
  std::ostringstream o;
  o << "{\"seq_len\": " << seq_len << ", \"tokenizer\": {\"vocab_size\": " << tokenizer.vocab_size
    << ", \"bos_id\": " << tokenizer.bos_id << ", \"eos_id\": " << tokenizer.eos_id << ", \"flags\": " << tokenizer.flags
    << ", \"model_fingerprint\": " << json_quote(hex64(tokenizer.model_fingerprint))
    << "}, \"mixture\": " << json_quote(mixture) << ", \"datasets\": [";
  for (size_t d = 0; d < datasets.size(); ++d) {
    o << (d ? ", " : "") << "{\"name\": " << json_quote(datasets[d].name)
      << ", \"weight\": " << json_number(datasets[d].weight) << ", \"shards\": [";
    for (size_t s = 0; s < datasets[d].shards.size(); ++s) {
      const Shard& sh = datasets[d].shards[s];
      o << (s ? ", " : "") << "{\"file\": " << json_quote(sh.file) << ", \"packs\": " << sh.packs
        << ", \"bin_xxh64\": " << json_quote(hex64(sh.bin_xxh64)) << "}";
    }
    o << "]}";
  }
  o << "]}";
  return o.str();
}

DataManifest DataManifest::from_json(const std::string& json, const std::string& where) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  LOOM_CHECK(!parser.parse(json).get(root), where, ": the data record is not valid JSON");
  DataManifest m;
  const auto need = [&](auto err, const char* what) { LOOM_CHECK(!err, where, ": the data record has no ", what); };
  int64_t i = 0;
  uint64_t u = 0;
  std::string_view text;
  need(root["seq_len"].get(m.seq_len), "seq_len");
  simdjson::dom::element tok = root["tokenizer"];
  need(tok["vocab_size"].get(u), "tokenizer.vocab_size");
  m.tokenizer.vocab_size = static_cast<uint32_t>(u);
  need(tok["bos_id"].get(i), "tokenizer.bos_id");
  m.tokenizer.bos_id = static_cast<int32_t>(i);
  need(tok["eos_id"].get(i), "tokenizer.eos_id");
  m.tokenizer.eos_id = static_cast<int32_t>(i);
  need(tok["flags"].get(u), "tokenizer.flags");
  m.tokenizer.flags = static_cast<uint32_t>(u);
  need(tok["model_fingerprint"].get(text), "tokenizer.model_fingerprint");
  m.tokenizer.model_fingerprint = unhex(text, where);
  if (!root["mixture"].get(text)) m.mixture = std::string(text);
  simdjson::dom::array datasets;
  need(root["datasets"].get(datasets), "datasets");
  for (simdjson::dom::element d : datasets) {
    Dataset ds;
    need(d["name"].get(text), "dataset name");
    ds.name = std::string(text);
    need(d["weight"].get(ds.weight), "dataset weight");
    simdjson::dom::array shards;
    need(d["shards"].get(shards), "dataset shards");
    for (simdjson::dom::element s : shards) {
      Shard sh;
      need(s["file"].get(text), "shard file");
      sh.file = std::string(text);
      need(s["packs"].get(sh.packs), "shard packs");
      need(s["bin_xxh64"].get(text), "shard bin_xxh64");
      sh.bin_xxh64 = unhex(text, where);
      ds.shards.push_back(std::move(sh));
    }
    m.datasets.push_back(std::move(ds));
  }
  return m;
}

std::vector<std::string> data_changes(const DataManifest& saved, const DataManifest& now, const std::string& where) {
  check_same_tokenizer(saved.tokenizer, where + " (the data it was trained on)", now.tokenizer, "this run's data");
  std::vector<std::string> out;
  if (saved.seq_len != now.seq_len) out.push_back(str("seq_len ", saved.seq_len, " -> ", now.seq_len));
  if (saved.mixture != now.mixture) out.push_back("data.mixture " + saved.mixture + " -> " + now.mixture);
  std::map<std::string, const DataManifest::Dataset*> before, after;
  for (const auto& d : saved.datasets) before[d.name] = &d;
  for (const auto& d : now.datasets) after[d.name] = &d;
  std::string added, removed;
  for (const auto& [name, d] : after)
    if (!before.count(name)) added += (added.empty() ? "" : ", ") + name;
  for (const auto& [name, d] : before)
    if (!after.count(name)) removed += (removed.empty() ? "" : ", ") + name;
  if (!added.empty()) out.push_back("datasets added: " + added);
  if (!removed.empty()) out.push_back("datasets removed: " + removed);
  for (const auto& [name, was] : before) {
    const auto it = after.find(name);
    if (it == after.end()) continue;
    const DataManifest::Dataset& is = *it->second;
    std::map<std::string, const DataManifest::Shard*> a, b;
    for (const auto& s : was->shards) a[s.file] = &s;
    for (const auto& s : is.shards) b[s.file] = &s;
    int64_t plus = 0, minus = 0, changed = 0;
    for (const auto& [file, s] : b) {
      const auto old = a.find(file);
      if (old == a.end()) ++plus;
      else if (old->second->bin_xxh64 != s->bin_xxh64 || old->second->packs != s->packs) ++changed;
    }
    for (const auto& [file, s] : a) minus += b.count(file) ? 0 : 1;
    std::string what;
    const auto add = [&](const std::string& part) { what += (what.empty() ? "" : ", ") + part; };
    if (plus) add(str(plus, plus == 1 ? " shard" : " shards", " added"));
    if (minus) add(str(minus, minus == 1 ? " shard" : " shards", " removed"));
    if (changed) add(str(changed, changed == 1 ? " shard" : " shards", " with other contents"));
    if (was->weight != is.weight) add("weight " + json_number(was->weight) + " -> " + json_number(is.weight));
    if (!what.empty()) out.push_back("dataset " + name + ": " + what);
  }
  return out;
}

}  // namespace loom
