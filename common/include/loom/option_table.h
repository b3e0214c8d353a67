// A tool's keys declared once each: name ("section.key"), help, check, bound to the field of the
// options struct that holds the value. The default is the field's value when the key is declared,
// so the struct's member initializer is the only place a default is written. From the one table
// come --help (through OptionParser), the parse into the fields, the checks and the INI dumps.
//
// Values travel as text (po::value<std::string>) and are read here: Boost would read "-1" into an
// unsigned as 2^64-1 and "nan" into a double.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/error.h"
#include "loom/options.h"

namespace loom {

// A field's value as INI text: integers in decimal, doubles as the shortest text that reads back
// as the same value, bools as true/false.
std::string option_text(const std::string& v);
std::string option_text(bool v);
std::string option_text(int64_t v);
std::string option_text(uint64_t v);
std::string option_text(double v);

// Text into a field; throws UsageError naming the key ("--adam.lr: 'x' is not a finite number").
// Bools take true/false, 1/0, yes/no, on/off, as Boost does.
void read_option(const std::string& key, const std::string& text, std::string* out);
void read_option(const std::string& key, const std::string& text, bool* out);
void read_option(const std::string& key, const std::string& text, int64_t* out);
void read_option(const std::string& key, const std::string& text, uint64_t* out);
void read_option(const std::string& key, const std::string& text, double* out);

// What a number must satisfy once read: a failure says "KEY MUST, got VALUE" (loom::Error). Checked
// as a double, exact for every integer a bound here meets.
struct Check {
  std::function<bool(double)> ok;  // empty: every value of the type
  std::string must;                // "must be >= 0"
};
Check at_least(double lo, const std::string& note = "");  // "must be >= lo" + note
Check above(double lo, const std::string& note = "");     // "must be > lo" + note
Check half_open(double lo, double hi);                    // "must be in [lo, hi)"

// The same for a text key; one_of({"auto", "gloo", "nccl"}) says "must be auto, gloo or nccl".
struct TextCheck {
  std::function<bool(const std::string&)> ok;
  std::string must;
};
TextCheck one_of(const std::vector<std::string>& names);

class OptionTable {
 public:
  struct Key {
    std::string name;          // "section.key", or a command-line flag's name ("resume")
    std::string help;
    std::string default_text;  // the field's text when declared
    bool required = false;     // no default: the run must give it (--help prints none)
    bool is_switch = false;    // --name without a value: true when given
    std::function<std::string()> text;             // the field's value as INI text
    std::function<void(const std::string&)> read;  // INI text -> the field
    std::function<void()> check;                   // throws loom::Error naming the key; may be empty
  };

  // A key read from its text into *field, then checked.
  template <typename T>
  Key& add(const std::string& name, T* field, const std::string& help, Check check = {}) {
    static_assert(std::is_arithmetic_v<T>, "text keys take a TextCheck");
    Key& k = bind(name, field, help);
    if (check.ok)
      k.check = [name, field, check] {
        LOOM_CHECK(check.ok(static_cast<double>(*field)), name, " ", check.must, ", got ", option_text(*field));
      };
    return k;
  }
  Key& add(const std::string& name, std::string* field, const std::string& help, TextCheck check = {});
  // A key whose text is not its field's type ("auto" or a number, a dtype name): its own
  // conversions both ways; read throws naming the key.
  Key& add_text(const std::string& name, const std::string& help, std::function<std::string()> text,
                std::function<void(const std::string&)> read);
  // A command-line flag without a value (--profiling); `name = true` in an INI file.
  Key& add_switch(const std::string& name, bool* field, const std::string& help);

  const std::vector<Key>& keys() const { return keys_; }

  // Registers every key with p, in declaration order: --help lists them with their defaults.
  void declare(OptionParser& p) const;
  // After p.parse(): every key's text into its field, then every key's check.
  void read(const OptionParser& p) const;
  // Every key's current value in INI form ([section] lines from the dotted names, sections and
  // keys sorted; keys without a dot first, outside any section). changed_only: only the keys
  // whose text differs from their default's (what a tool prints at start).
  std::string ini(bool changed_only) const;

 private:
  std::vector<Key> keys_;
  Key& push(Key k);
  template <typename T>
  Key& bind(const std::string& name, T* field, const std::string& help) {
    Key k;
    k.name = name;
    k.help = help;
    k.text = [field] { return option_text(*field); };
    k.read = [name, field](const std::string& t) { read_option(name, t, field); };
    return push(std::move(k));
  }
};

}  // namespace loom
