#include "loom/option_table.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

#include "loom/cli.h"
#include "loom/json_text.h"
#include "loom/option_keys.h"

namespace loom {

std::string option_text(const std::string& v) { return v; }
std::string option_text(bool v) { return v ? "true" : "false"; }
std::string option_text(int64_t v) { return std::to_string(v); }
std::string option_text(uint64_t v) { return std::to_string(v); }
std::string option_text(double v) { return json_number(v); }

void read_option(const std::string&, const std::string& text, std::string* out) { *out = text; }

void read_option(const std::string& key, const std::string& text, bool* out) {
  std::string t = text;
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "true" || t == "1" || t == "yes" || t == "on") {
    *out = true;
  } else if (t == "false" || t == "0" || t == "no" || t == "off") {
    *out = false;
  } else {
    throw UsageError(str("--", key, ": '", text, "' is not a boolean (true or false)"));
  }
}

namespace {
// Any value of the field's type (its checks come later); "+5" reads as 5, as Boost would.
std::string without_plus(const std::string& text) { return !text.empty() && text[0] == '+' ? text.substr(1) : text; }
}  // namespace

void read_option(const std::string& key, const std::string& text, int64_t* out) {
  *out = parse_int(key, without_plus(text), std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
}
void read_option(const std::string& key, const std::string& text, uint64_t* out) {
  *out = parse_uint(key, without_plus(text), 0, std::numeric_limits<uint64_t>::max());
}

void read_option(const std::string& key, const std::string& text, double* out) {
  char* end = nullptr;
  const double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  // No key means inf or NaN, and the INI dump could not write one back (json_number gives null).
  if (!std::isfinite(v) || end != text.c_str() + text.size())
    throw UsageError(str("--", key, ": '", text, "' is not a finite number"));
  *out = v;
}

Check at_least(double lo, const std::string& note) {
  return {[lo](double v) { return v >= lo; }, "must be >= " + option_text(lo) + note};
}

Check above(double lo, const std::string& note) {
  return {[lo](double v) { return v > lo; }, "must be > " + option_text(lo) + note};
}

Check half_open(double lo, double hi) {
  return {[lo, hi](double v) { return v >= lo && v < hi; },
          "must be in [" + option_text(lo) + ", " + option_text(hi) + ")"};
}

TextCheck one_of(const std::vector<std::string>& names) {
  std::string list;
  for (size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return {[names](const std::string& v) {
            for (const auto& n : names)
              if (v == n) return true;
            return false;
          },
          "must be " + list};
}

OptionTable::Key& OptionTable::push(Key k) {
  k.default_text = k.text();
  keys_.push_back(std::move(k));
  return keys_.back();
}

OptionTable::Key& OptionTable::add(const std::string& name, std::string* field, const std::string& help,
                                   TextCheck check) {
  Key& k = bind(name, field, help);
  if (check.ok)
    k.check = [name, field, check] { LOOM_CHECK(check.ok(*field), name, " ", check.must, ", got '", *field, "'"); };
  return k;
}

OptionTable::Key& OptionTable::add_text(const std::string& name, const std::string& help,
                                        std::function<std::string()> text,
                                        std::function<void(const std::string&)> read) {
  Key k;
  k.name = name;
  k.help = help;
  k.text = std::move(text);
  k.read = std::move(read);
  return push(std::move(k));
}

OptionTable::Key& OptionTable::add_switch(const std::string& name, bool* field, const std::string& help) {
  Key& k = bind(name, field, help);
  k.is_switch = true;
  return k;
}

void OptionTable::declare(OptionParser& p) const {
  auto add = p.options().add_options();
  for (const Key& k : keys_) {
    if (k.is_switch) {
      add(k.name.c_str(), po::bool_switch(), k.help.c_str());
    } else if (k.required) {
      add(k.name.c_str(), po::value<std::string>()->required(), k.help.c_str());
    } else {
      // Boost prints no "(=...)" for an empty default text: --help shows "" defaults as none.
      add(k.name.c_str(), po::value<std::string>()->default_value(k.default_text, k.default_text), k.help.c_str());
    }
  }
}

void OptionTable::read(const OptionParser& p) const {
  for (const Key& k : keys_) {
    if (!p.vm().count(k.name)) continue;
    k.read(k.is_switch ? option_text(p.get<bool>(k.name)) : p.get<std::string>(k.name));
  }
  for (const Key& k : keys_)
    if (k.check) k.check();
}

std::string OptionTable::ini(bool changed_only) const {
  IniSections sections;
  for (const Key& k : keys_) {
    const std::string value = k.text();
    if (!changed_only || value != k.default_text) add_ini_value(sections, k.name, value);
  }
  return ini_text(sections);
}

}  // namespace loom
