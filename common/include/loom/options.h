// The one options scheme of every loom tool: Boost.Program_options, with
//   --config FILE.ini            keys as INI ([section] key = value  ==  --section.key=value)
//   --section.key=value          overrides the file (the command line wins)
// Unknown keys are errors in both places. resolved_ini() gives back every option's final value in
// INI form, for printing at start and saving next to the outputs (a run can be repeated from it).
//
// Numeric options are declared as text (po::value<std::string>()) and read with get_int,
// get_uint or get_double, which check a range: Boost reads "-1" into an unsigned as 2^64-1 (it
// wraps like strtoull), so a check after Boost's parse could not see the minus sign.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <map>
#include <utility>
#include <string>
#include <vector>

namespace loom {

namespace po = boost::program_options;
class KeyIndex;  // loom/option_keys.h

// The value of --option given as text, checked to be a number in [min, max]; else UsageError
// ("--threads: '-1' is not an integer in [1, 1024]"). Integers are decimal, without sign for get_uint.
int64_t parse_int(const std::string& option, const std::string& text, int64_t min, int64_t max);
uint64_t parse_uint(const std::string& option, const std::string& text, uint64_t min, uint64_t max);
double parse_double(const std::string& option, const std::string& text, double min, double max);

class OptionParser {
 public:
  // usage: the synopsis line(s) printed by --help, e.g. "loom-tokenize --model M --output-dir D INPUT...".
  OptionParser(std::string program, std::string usage);

  po::options_description& options() { return desc_; }
  // Positional arguments go to option `name` (a std::vector<std::string>); max -1 = any number.
  void positional(const std::string& name, int max = -1);
  // --name (and `name =` in an INI file) means --target: another tool's spelling of an option
  // (loom-tokenize's --workers for Megatron users). Listed by --help.
  void alias(const std::string& name, const std::string& target);

  // Parses args (without the program name). Returns false when --help was asked for (help printed
  // on stdout); throws loom::UsageError (exit code 2, loom/cli.h) on unknown or malformed options
  // or an unreadable --config file. Keys are matched as loom/option_keys.h says ('-' = '_',
  // aliases); an unknown key is reported with the nearest known one, and in the INI file with its
  // FILE:LINE.
  bool parse(const std::vector<std::string>& args);
  bool parse(int argc, char** argv);

  const po::variables_map& vm() const { return vm_; }
  template <typename T>
  T get(const std::string& key) const {
    return vm_.at(key).as<T>();
  }
  // A numeric option declared as text, range-checked (parse_int and friends above).
  int64_t get_int(const std::string& key, int64_t min, int64_t max) const;
  uint64_t get_uint(const std::string& key, uint64_t min, uint64_t max) const;
  double get_double(const std::string& key, double min, double max) const;
  bool has(const std::string& key) const { return vm_.count(key) > 0 && !vm_.at(key).defaulted(); }
  // The resolved configuration in INI form (sections from the dotted names), positionals excluded.
  // Doubles print as the shortest text that reads back as the same value (json_number).
  std::string resolved_ini() const;
  // The same, only the keys whose value differs from their default: what a tool prints at start.
  std::string changed_ini() const;
  // The usage line, the options and the exit codes (loom/cli.h).
  std::string help() const;

 private:
  std::string program_, usage_;
  po::options_description desc_;
  po::positional_options_description pos_;
  std::string pos_name_;
  po::variables_map vm_;
  std::vector<std::pair<std::string, std::string>> aliases_;  // name -> target
  std::string ini(bool changed_only) const;
  KeyIndex key_index() const;
};

// INI text from dotted names: section -> key -> value, written as [section] blocks with their keys
// sorted (keys without a section first, outside any), each key with '_' (loom/option_keys.h).
using IniSections = std::map<std::string, std::map<std::string, std::string>>;
void add_ini_value(IniSections& sections, const std::string& dotted_name, const std::string& value);
std::string ini_text(const IniSections& sections);

// po::value(p)->default_value(v) with the default shown (--help) as the shortest text that reads
// back as v: Boost's own text of 0.9 is 0.90000000000000002.
po::typed_value<double>* value_with_default(double* p, double v);
// A boolean option (--key=true|false, `key = true` in an INI file) whose default --help shows as
// (=true)/(=false), as config files and the start-up dumps write it: Boost's own text is (=1)/(=0).
// Every tool declares its bool options with a default through this.
po::typed_value<bool>* value_with_default(bool* p, bool v);

}  // namespace loom
