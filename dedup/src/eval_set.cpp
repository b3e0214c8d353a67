#include "loom/dedup/eval_set.h"

#include <simdjson.h>

#include "loom/dedup/minhash.h"
#include "loom/error.h"
#include "loom/hash.h"
#include "loom/spm/sentencepiece_model.h"
#include "loom/strings.h"
#include "loom/sys.h"

namespace loom::dedup {

namespace {
std::vector<std::string> nonempty_lines(const std::string& data, std::vector<size_t>& line_numbers) {
  std::vector<std::string> lines;
  size_t start = 0, line = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    ++line;
    std::string s = data.substr(start, end - start);
    if (!s.empty() && s.back() == '\r') s.pop_back();
    if (s.find_first_not_of(" \t") != std::string::npos) lines.push_back(std::move(s)), line_numbers.push_back(line);
    start = end + 1;
  }
  return lines;
}

std::string text_at(simdjson::dom::element e, const std::string& key, const std::string& where) {
  simdjson::dom::object obj;
  LOOM_CHECK(e.get_object().get(obj) == simdjson::SUCCESS, where, ": expected a JSON object");
  std::string_view text;
  LOOM_CHECK(obj[key].get_string().get(text) == simdjson::SUCCESS, where, ": expected a string at key '", key, "'");
  return std::string(text);
}
}  // namespace

std::vector<EvalText> read_eval_items(const std::string& path, const std::string& key) {
  const std::string data = sys::read_file(path);
  std::vector<EvalText> items;
  simdjson::dom::parser parser;
  if (ends_with(path, ".json")) {
    simdjson::dom::element root;
    LOOM_CHECK(parser.parse(data).get(root) == simdjson::SUCCESS, path, ": not valid JSON");
    simdjson::dom::array arr;
    LOOM_CHECK(root.get_array().get(arr) == simdjson::SUCCESS, path, ": expected a JSON array of objects");
    size_t i = 0;
    for (simdjson::dom::element e : arr) {
      ++i;
      const std::string where = str(path, ":", i);
      items.push_back({where, text_at(e, key, str(path, ": element ", i))});
    }
    return items;
  }
  LOOM_CHECK(ends_with(path, ".jsonl") || ends_with(path, ".txt"), path,
             ": evaluation files are .txt, .json or .jsonl");
  std::vector<size_t> numbers;
  const std::vector<std::string> lines = nonempty_lines(data, numbers);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = str(path, ":", numbers[i]);
    if (ends_with(path, ".txt")) {
      items.push_back({where, lines[i]});
      continue;
    }
    simdjson::dom::element e;
    LOOM_CHECK(parser.parse(lines[i]).get(e) == simdjson::SUCCESS, where, ": not valid JSON");
    items.push_back({where, text_at(e, key, where)});
  }
  return items;
}

uint64_t eval_fingerprint(const EvalOptions& o) {
  Xxh64 fp;
  fp.update(o.key.data(), o.key.size());
  fp.update(&o.ngram, sizeof o.ngram);
  const uint64_t model = xxh64_file(o.model);
  fp.update(&model, sizeof model);
  for (const std::string& file : o.files) {
    const uint64_t h = xxh64_file(file);
    fp.update(&h, sizeof h);
  }
  return fp.digest();
}

EvalSet::EvalSet(const EvalOptions& o) : ngram_(o.ngram) {
  LOOM_CHECK(!o.model.empty(), "--eval needs --model, the SentencePiece model the training data was tokenized with");
  const SentencePieceModel model(o.model, EncoderChoice::kAuto);
  tokenizer_ = model.info(false, false);
  std::vector<uint32_t> ids;
  std::vector<uint64_t> grams;
  for (const std::string& file : o.files) {
    for (EvalText& item : read_eval_items(file, o.key)) {
      ids.clear();
      model.encode(item.text, ids);
      const uint32_t index = static_cast<uint32_t>(names_.size());
      names_.push_back(std::move(item.name));
      if (ids.size() < ngram_) {
        ++short_items_;
        continue;
      }
      shingles(ids.data(), ids.size(), ngram_, grams);
      for (uint64_t g : grams) ngrams_.emplace(g, index);  // keeps the first (smallest) item
    }
  }
  fingerprint_ = eval_fingerprint(o);
}

bool EvalSet::first_match(const uint32_t* ids, size_t n, uint64_t& position, uint64_t& item,
                          std::vector<uint64_t>& scratch) const {
  if (n < ngram_ || ngrams_.empty()) return false;
  shingles(ids, n, ngram_, scratch);
  for (size_t j = 0; j < scratch.size(); ++j) {
    const auto it = ngrams_.find(scratch[j]);
    if (it != ngrams_.end()) {
      position = j, item = it->second;
      return true;
    }
  }
  return false;
}

}  // namespace loom::dedup
