#include "loom/options.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "loom/cli.h"
#include "loom/error.h"

namespace loom {

namespace {
template <typename T>
T parse_integer(const std::string& option, const std::string& text, T min, T max) {
  const char* b = text.data();
  const char* e = b + text.size();
  T v{};
  const auto [end, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || end != e || b == e || v < min || v > max)
    throw UsageError(str("--", option, ": '", text, "' is not an integer in [", min, ", ", max, "]"));
  return v;
}
}  // namespace

int64_t parse_int(const std::string& option, const std::string& text, int64_t min, int64_t max) {
  return parse_integer<int64_t>(option, text, min, max);
}

uint64_t parse_uint(const std::string& option, const std::string& text, uint64_t min, uint64_t max) {
  return parse_integer<uint64_t>(option, text, min, max);
}

double parse_double(const std::string& option, const std::string& text, double min, double max) {
  char* end = nullptr;
  const double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (!std::isfinite(v) || end != text.c_str() + text.size() || v < min || v > max)
    throw UsageError(str("--", option, ": '", text, "' is not a number in [", min, ", ", max, "]"));
  return v;
}

int64_t OptionParser::get_int(const std::string& key, int64_t min, int64_t max) const {
  return parse_int(key, get<std::string>(key), min, max);
}

uint64_t OptionParser::get_uint(const std::string& key, uint64_t min, uint64_t max) const {
  return parse_uint(key, get<std::string>(key), min, max);
}

double OptionParser::get_double(const std::string& key, double min, double max) const {
  return parse_double(key, get<std::string>(key), min, max);
}

OptionParser::OptionParser(std::string program, std::string usage)
    : program_(std::move(program)), usage_(std::move(usage)), desc_("Options") {
  desc_.add_options()("help,h", "print this help and exit")(
      "config", po::value<std::string>(), "INI file of options; command-line options override it");
}

void OptionParser::positional(const std::string& name, int max) {
  pos_name_ = name;
  pos_.add(name.c_str(), max);
}

bool OptionParser::parse(int argc, char** argv) {
  return parse(std::vector<std::string>(argv + 1, argv + argc));
}

bool OptionParser::parse(const std::vector<std::string>& args_in) {
  // "--key=" means an empty value, as `key =` does in an INI file; Boost refuses that spelling, so
  // it becomes "--key" "".
  std::vector<std::string> args;
  for (const std::string& a : args_in) {
    if (a.size() > 3 && a.compare(0, 2, "--") == 0 && a.back() == '=' && a.find('=') == a.size() - 1) {
      args.push_back(a.substr(0, a.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(a);
    }
  }
  try {
    po::store(po::command_line_parser(args).options(desc_).positional(pos_).run(), vm_);
    if (vm_.count("help")) {
      std::cout << help();
      return false;
    }
    if (vm_.count("config")) {
      const std::string path = vm_["config"].as<std::string>();
      std::ifstream in(path);
      if (!in.good()) throw UsageError(str(program_, ": cannot read config file ", path));
      // allow_unregistered = false: an unknown key in the file is an error, like on the command line.
      po::store(po::parse_config_file(in, desc_, false), vm_);
    }
    po::notify(vm_);
  } catch (const po::error& e) {
    throw UsageError(str(program_, ": ", e.what(), " (see ", program_, " --help)"));
  }
  return true;
}

std::string OptionParser::help() const {
  std::ostringstream os;
  os << "Usage: " << usage_ << "\n\n" << desc_ << "\n" << exit_codes_help() << "\n";
  return os.str();
}

namespace {
std::string value_text(const po::variable_value& v) {
  const boost::any& a = v.value();
  if (auto p = boost::any_cast<std::string>(&a)) return *p;
  if (auto p = boost::any_cast<bool>(&a)) return *p ? "true" : "false";
  if (auto p = boost::any_cast<int>(&a)) return std::to_string(*p);
  if (auto p = boost::any_cast<int64_t>(&a)) return std::to_string(*p);
  if (auto p = boost::any_cast<uint64_t>(&a)) return std::to_string(*p);
  if (auto p = boost::any_cast<unsigned>(&a)) return std::to_string(*p);
  if (auto p = boost::any_cast<double>(&a)) {
    std::ostringstream os;
    os.precision(17);
    os << *p;
    return os.str();
  }
  if (auto p = boost::any_cast<float>(&a)) {
    std::ostringstream os;
    os.precision(9);
    os << *p;
    return os.str();
  }
  if (auto p = boost::any_cast<std::vector<std::string>>(&a)) {
    std::string s;
    for (const auto& x : *p) s += (s.empty() ? "" : ",") + x;
    return s;
  }
  return "<unprintable>";
}
}  // namespace

std::string OptionParser::resolved_ini() const {
  // section -> (key -> value); keys without a dot go first, outside any section.
  std::map<std::string, std::map<std::string, std::string>> sections;
  for (const auto& opt : desc_.options()) {
    const std::string name = opt->long_name();
    if (name == "help" || name == "config" || name == pos_name_) continue;
    auto it = vm_.find(name);
    if (it == vm_.end() || it->second.empty()) continue;
    auto dot = name.find('.');
    std::string section = dot == std::string::npos ? "" : name.substr(0, dot);
    std::string key = dot == std::string::npos ? name : name.substr(dot + 1);
    sections[section][key] = value_text(it->second);
  }
  std::ostringstream os;
  for (const auto& [section, kv] : sections) {
    if (!section.empty()) os << "[" << section << "]\n";
    for (const auto& [k, v] : kv) os << k << " = " << v << "\n";
  }
  return os.str();
}

}  // namespace loom
