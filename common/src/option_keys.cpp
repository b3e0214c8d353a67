#include "loom/option_keys.h"

#include <algorithm>
#include <fstream>
#include <limits>

#include "loom/cli.h"
#include "loom/error.h"

namespace loom {

size_t edit_distance(std::string_view a, std::string_view b) {
  // One row of the dynamic-programming table at a time: row[j] = distance(a[0:i], b[0:j]).
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];  // distance(a[0:i-1], b[0:j-1])
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string normal_key(std::string_view key) {
  std::string s(key);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

void KeyIndex::add(const std::string& name) {
  names_.push_back(name);
  auto [it, fresh] = by_normal_.emplace(normal_key(name), name);
  if (!fresh && it->second != name) it->second.clear();  // two options differ only by -/_: neither by normal form
}

void KeyIndex::add_alias(const std::string& alias, const std::string& target) {
  names_.push_back(alias);
  by_normal_[normal_key(alias)] = target;
}

std::string KeyIndex::resolve(std::string_view spelled) const {
  const auto it = by_normal_.find(normal_key(spelled));
  if (it == by_normal_.end()) return "";
  // An exact registered name always means itself, even when another name collides with it.
  if (it->second.empty()) return std::find(names_.begin(), names_.end(), spelled) != names_.end() ? std::string(spelled) : "";
  return it->second;
}

std::string KeyIndex::nearest(std::string_view spelled) const {
  const std::string want = normal_key(spelled);
  const bool sectioned = want.find('.') != std::string::npos;
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& name : names_) {
    const std::string have = normal_key(name);
    size_t d = edit_distance(want, have);
    // "seq_len" for "data.seq_len": the key is right, only its section is missing.
    const auto dot = have.find('.');
    if (!sectioned && dot != std::string::npos) d = std::min(d, edit_distance(want, have.substr(dot + 1)) + 1);
    if (d < best_distance) best_distance = d, best = name;
  }
  const size_t limit = std::max<size_t>(2, want.size() / 3);
  return best_distance <= limit ? best : "";
}

std::string KeyIndex::suggestion(std::string_view spelled, const std::string& prefix) const {
  const std::string n = nearest(spelled);
  return n.empty() ? "" : str(" (did you mean '", prefix, n, "'?)");
}

namespace {
std::string trim(const std::string& s) {
  const char* ws = " \t\r\n\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}
}  // namespace

std::vector<IniEntry> read_ini_file(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) throw UsageError(str("cannot read config file ", path));
  std::vector<IniEntry> out;
  std::string section, raw;
  for (int line = 1; std::getline(in, raw); ++line) {
    const std::string s = trim(raw.substr(0, raw.find('#')));
    if (s.empty()) continue;
    if (s.front() == '[') {
      if (s.back() != ']' || s.size() < 3)
        throw UsageError(str(path, ":", line, ": '", s, "' is not a [section] line"));
      section = trim(s.substr(1, s.size() - 2)) + ".";
      continue;
    }
    const size_t eq = s.find('=');
    if (eq == std::string::npos || trim(s.substr(0, eq)).empty())
      throw UsageError(str(path, ":", line, ": '", s, "' is not a `key = value` line"));
    out.push_back({section + trim(s.substr(0, eq)), trim(s.substr(eq + 1)), line});
  }
  if (in.bad()) throw UsageError(str("cannot read config file ", path));
  return out;
}

}  // namespace loom
