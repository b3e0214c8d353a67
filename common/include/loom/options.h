// The one options scheme of every loom tool: Boost.Program_options, with
//   --config FILE.ini            keys as INI ([section] key = value  ==  --section.key=value)
//   --section.key=value          overrides the file (the command line wins)
// Unknown keys are errors in both places. resolved_ini() gives back every option's final value in
// INI form, for printing at start and saving next to the outputs (a run can be repeated from it).
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

namespace loom {

namespace po = boost::program_options;

class OptionParser {
 public:
  // usage: the synopsis line(s) printed by --help, e.g. "loom-tokenize --model M --output-dir D INPUT...".
  OptionParser(std::string program, std::string usage);

  po::options_description& options() { return desc_; }
  // Positional arguments go to option `name` (a std::vector<std::string>); max -1 = any number.
  void positional(const std::string& name, int max = -1);

  // Parses args (without the program name). Returns false when --help was asked for (help printed
  // on stdout); throws loom::UsageError (exit code 2, loom/cli.h) on unknown or malformed options
  // or an unreadable --config file.
  bool parse(const std::vector<std::string>& args);
  bool parse(int argc, char** argv);

  const po::variables_map& vm() const { return vm_; }
  template <typename T>
  T get(const std::string& key) const {
    return vm_.at(key).as<T>();
  }
  bool has(const std::string& key) const { return vm_.count(key) > 0 && !vm_.at(key).defaulted(); }
  // The resolved configuration in INI form (sections from the dotted names), positionals excluded.
  std::string resolved_ini() const;
  // The usage line, the options and the exit codes (loom/cli.h).
  std::string help() const;

 private:
  std::string program_, usage_;
  po::options_description desc_;
  po::positional_options_description pos_;
  std::string pos_name_;
  po::variables_map vm_;
};

}  // namespace loom
