#include "loom/options.h"

#include <cctype>
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
#include "loom/json_text.h"
#include "loom/option_keys.h"

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

void OptionParser::alias(const std::string& name, const std::string& target) { aliases_.emplace_back(name, target); }

KeyIndex OptionParser::key_index() const {
  KeyIndex keys;
  for (const auto& opt : desc_.options())
    if (opt->long_name() != "help" && opt->long_name() != "config") keys.add(opt->long_name());
  for (const auto& [name, target] : aliases_) keys.add_alias(name, target);
  return keys;
}

namespace {
// Boost.Program_options builds an error's message by replacing placeholders ("%value%",
// "%canonical_option%", ...) until none is left (error_with_option_name::replace_token), so an
// error about a token that contains the placeholder it is substituted for ("--x=%value%",
// "--%canonical_option%") makes what() loop forever. When parsing failed and some token holds a
// placeholder, that token is named instead of calling what().
struct Token {
  std::string where, text;
};
void refuse_placeholders(const std::string& program, const std::vector<Token>& tokens) {
  for (const Token& t : tokens) {
    // In lower case: Boost's bool validator lower-cases the value it quotes ("%VALUE%" too).
    std::string lower = t.text;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* p : {"%canonical_option%", "%option%", "%original_token%", "%value%", "%prefix%"})
      if (lower.find(p) != std::string::npos)
        throw UsageError(str(program, ": bad options, and the parser's message cannot be printed: ", t.where, "'",
                             t.text, "' holds ", p, ", a placeholder of its messages"));
  }
}
}  // namespace

bool OptionParser::parse(const std::vector<std::string>& args_in) {
  const KeyIndex keys = key_index();
  std::vector<Token> tokens;  // what Boost saw, for refuse_placeholders()
  for (const std::string& a : args_in) tokens.push_back({"", a});
  // Each "--key[=value]" takes the registered spelling of its key (loom/option_keys.h: '-' and '_'
  // agree, aliases). "--key=" means an empty value, as `key =` does in an INI file; Boost refuses
  // that spelling, so it becomes "--key" "". After a bare "--" everything is positional.
  std::vector<std::string> args;
  bool options_done = false;
  for (const std::string& a : args_in) {
    if (options_done || a.size() <= 2 || a.compare(0, 2, "--") != 0) {
      options_done = options_done || a == "--";
      args.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string registered = keys.resolve(name);
    if (!registered.empty()) name = registered;
    if (eq == std::string::npos) {
      args.push_back("--" + name);
    } else if (eq == a.size() - 1) {
      args.push_back("--" + name);
      args.emplace_back();
    } else {
      args.push_back("--" + name + a.substr(eq));
    }
  }
  try {
    po::store(po::command_line_parser(args).options(desc_).positional(pos_).run(), vm_);
    if (vm_.count("help")) {
      std::cout << help();
      return false;
    }
    if (vm_.count("config")) {
      // Read here rather than by po::parse_config_file, so that an unknown key names its line and
      // the nearest known key, and keys take the registered spelling as on the command line.
      const std::string path = vm_["config"].as<std::string>();
      po::parsed_options parsed(&desc_);
      for (const IniEntry& e : read_ini_file(path)) {
        const std::string name = keys.resolve(e.key);
        if (name.empty())
          throw UsageError(str(path, ":", e.line, ": unknown key '", e.key, "'", keys.suggestion(e.key, ""), " (see ",
                               program_, " --help)"));
        tokens.push_back({str(path, ":", e.line, ": "), e.key});
        tokens.push_back({str(path, ":", e.line, ": "), e.value});
        po::option o(name, {e.value});
        o.original_tokens = {e.key, e.value};
        parsed.options.push_back(std::move(o));
      }
      po::store(parsed, vm_);
    }
    po::notify(vm_);
    // Boost reads "nan" and "inf" into a double. No loom option means either, and resolved_ini() could
    // not write one back (json_number prints null), so a run's saved configuration would not repeat it.
    for (const auto& [name, value] : vm_) {
      const double* d = boost::any_cast<double>(&value.value());
      const float* f = boost::any_cast<float>(&value.value());
      if ((d && !std::isfinite(*d)) || (f && !std::isfinite(*f)))
        throw UsageError(str("--", name, ": ", d ? *d : *f, " is not a finite number"));
    }
  } catch (const po::unknown_option& e) {
    refuse_placeholders(program_, tokens);
    std::string name = e.get_option_name();
    name.erase(0, name.find_first_not_of('-'));
    name = name.substr(0, name.find('='));
    throw UsageError(str(program_, ": ", e.what(), keys.suggestion(name, "--"), " (see ", program_, " --help)"));
  } catch (const po::error& e) {
    refuse_placeholders(program_, tokens);
    throw UsageError(str(program_, ": ", e.what(), " (see ", program_, " --help)"));
  } catch (const UsageError& e) {
    throw UsageError(str(program_, ": ", e.what()));
  }
  return true;
}

std::string OptionParser::help() const {
  std::ostringstream os;
  os << "Usage: " << usage_ << "\n\n" << desc_ << "\n";
  if (!aliases_.empty()) {
    os << "Aliases:";
    for (const auto& [name, target] : aliases_) os << " --" << name << " = --" << target << ";";
    os << "\n";
  }
  os << "'-' and '_' are the same character in option names and INI keys (--seq-len = --seq_len).\n"
     << exit_codes_help() << "\n";
  return os.str();
}

namespace {
std::string value_text(const boost::any& a) {
  if (auto p = boost::any_cast<std::string>(&a)) return *p;
  if (auto p = boost::any_cast<bool>(&a)) return *p ? "true" : "false";
  if (auto p = boost::any_cast<int>(&a)) return std::to_string(*p);
  if (auto p = boost::any_cast<int64_t>(&a)) return std::to_string(*p);
  if (auto p = boost::any_cast<uint64_t>(&a)) return std::to_string(*p);
  if (auto p = boost::any_cast<unsigned>(&a)) return std::to_string(*p);
  if (auto p = boost::any_cast<double>(&a)) return json_number(*p);
  if (auto p = boost::any_cast<float>(&a)) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, *p);
    return std::string(buf, r.ptr);
  }
  if (auto p = boost::any_cast<std::vector<std::string>>(&a)) {
    std::string s;
    for (const auto& x : *p) s += (s.empty() ? "" : ",") + x;
    return s;
  }
  return "<unprintable>";
}
}  // namespace

po::typed_value<double>* value_with_default(double* p, double v) { return po::value(p)->default_value(v, json_number(v)); }

po::typed_value<bool>* value_with_default(bool* p, bool v) { return po::value(p)->default_value(v, v ? "true" : "false"); }

std::string OptionParser::resolved_ini() const { return ini(false); }

std::string OptionParser::changed_ini() const { return ini(true); }

std::string OptionParser::ini(bool changed_only) const {
  IniSections sections;
  for (const auto& opt : desc_.options()) {
    const std::string name = opt->long_name();
    if (name == "help" || name == "config" || name == pos_name_) continue;
    auto it = vm_.find(name);
    if (it == vm_.end() || it->second.empty()) continue;
    const std::string value = value_text(it->second.value());
    if (changed_only) {
      boost::any fallback;
      if (opt->semantic()->apply_default(fallback) && value_text(fallback) == value) continue;
    }
    add_ini_value(sections, name, value);
  }
  return ini_text(sections);
}

void add_ini_value(IniSections& sections, const std::string& name, const std::string& value) {
  const size_t dot = name.find('.');
  const std::string section = dot == std::string::npos ? "" : name.substr(0, dot);
  // Written with '_' (loom/option_keys.h): the INI spelling every tool accepts and the docs use.
  sections[section][normal_key(dot == std::string::npos ? name : name.substr(dot + 1))] = value;
}

std::string ini_text(const IniSections& sections) {
  std::ostringstream os;
  for (const auto& [section, kv] : sections) {
    if (!section.empty()) os << "[" << section << "]\n";
    for (const auto& [k, v] : kv) os << k << " = " << v << "\n";
  }
  return os.str();
}

}  // namespace loom
