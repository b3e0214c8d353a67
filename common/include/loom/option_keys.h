// How users may spell option keys, in every tool, on the command line and in INI files:
//   - '-' and '_' are the same character in a key: loom-pack's --seq-len is also --seq_len and
//     `seq_len = ...` in an INI file; loom-train's data.seq_len is also --data.seq-len. loom itself
//     writes keys with '_' in INI files and resolved configurations (docs: README "Conventions").
//   - an alias is a second name for an option (loom-tokenize's --workers for --threads).
//   - an unknown key is reported with the nearest known one ("did you mean 'data.seq_len'?").
// OptionParser (loom/options.h) applies all three; this header is the machinery, testable alone.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// Levenshtein distance (insertions, deletions, substitutions, each 1), bytes.
size_t edit_distance(std::string_view a, std::string_view b);

// The key with every '-' turned into '_': two spellings name one option when their normal forms agree.
std::string normal_key(std::string_view key);

class KeyIndex {
 public:
  // A registered option name, exactly as the tool declared it.
  void add(const std::string& name);
  // `alias` names the option `target` (which must be added too).
  void add_alias(const std::string& alias, const std::string& target);
  // The registered name a spelling means ("" when none): an exact name, an alias, or the one name
  // whose normal form is the spelling's.
  std::string resolve(std::string_view spelled) const;
  // The known name nearest to an unknown spelling, or "" when none is near: the smallest edit
  // distance between normal forms, at most 2, or at most a third of the spelling's length; a
  // spelling without a section ("seq_len") also matches a sectioned name ending in it.
  std::string nearest(std::string_view spelled) const;
  // " (did you mean 'X'?)" for nearest(spelled), with the given prefix before X ("--" on the
  // command line); "" when nothing is near.
  std::string suggestion(std::string_view spelled, const std::string& prefix) const;

 private:
  std::map<std::string, std::string> by_normal_;  // normal form -> registered name ("" if two collide)
  std::vector<std::string> names_;                 // registered names and aliases, for nearest()
};

// One `key = value` line of an INI file, the key prefixed by its [section] ("data.seq_len").
struct IniEntry {
  std::string key, value;
  int line = 0;
};
// Reads an INI file in Boost.Program_options' dialect: `[section]` lines, `key = value` lines with
// both sides trimmed, '#' starts a comment anywhere on a line, blank lines are skipped. Throws
// UsageError naming FILE:LINE for a line that is none of these, and for an unreadable file.
std::vector<IniEntry> read_ini_file(const std::string& path);

}  // namespace loom
