#include "loom/tokenize/python_json.h"

#include <charconv>
#include <cstdlib>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/error.h"

namespace loom::tokenize {

namespace {

void append_u4(std::string& out, unsigned v) {
  static const char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out.push_back(kHex[(v >> shift) & 0xF]);
}

// ensure_ascii: everything outside ' '..'~' is escaped; code points above U+FFFF as a surrogate pair.
void dumps_string(std::string_view s, std::string& out) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      if (c == '"') out += "\\\"";
      else if (c == '\\') out += "\\\\";
      else out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c < 0x80) {
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default: append_u4(out, c);
      }
      ++i;
      continue;
    }
    // simdjson has validated the UTF-8.
    char32_t cp;
    if (c < 0xE0) cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu), i += 2;
    else if (c < 0xF0) cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu), i += 3;
    else
      cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu), i += 4;
    if (cp >= 0x10000) {
      const char32_t v = cp - 0x10000;
      append_u4(out, 0xD800 + (v >> 10));
      append_u4(out, 0xDC00 + (v & 0x3FF));
    } else {
      append_u4(out, cp);
    }
  }
  out.push_back('"');
}

}  // namespace

void python_float_repr(double v, std::string& out) {
  if (v != v) return void(out += "NaN");
  if (v == 1.0 / 0.0) return void(out += "Infinity");
  if (v == -1.0 / 0.0) return void(out += "-Infinity");
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  LOOM_ASSERT(r.ec == std::errc(), "to_chars failed");
  std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));  // "-d.ddde+XX"
  bool neg = false;
  if (sci.front() == '-') neg = true, sci.remove_prefix(1);
  const size_t e = sci.find('e');
  std::string digits;
  for (char ch : sci.substr(0, e)) {
    if (ch != '.') digits.push_back(ch);
  }
  const int exp10 = std::atoi(std::string(sci.substr(e + 1)).c_str());
  if (neg) out.push_back('-');
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) out.append(".").append(digits, 1, std::string::npos);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    out += ebuf;
  } else if (decpt <= 0) {
    out.append("0.").append(static_cast<size_t>(-decpt), '0').append(digits);
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out.append(digits).append(static_cast<size_t>(decpt) - digits.size(), '0').append(".0");
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt)).append(".").append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
}

void python_json_dumps(simdjson::dom::element value, std::string& out) {
  using simdjson::dom::element_type;
  switch (value.type()) {
    case element_type::OBJECT: {
      // A Python dict keeps a repeated key at its first position with its last value.
      std::vector<std::pair<std::string_view, simdjson::dom::element>> fields;
      std::unordered_map<std::string_view, size_t> index;
      const simdjson::dom::object obj = value.get_object().value_unsafe();
      for (auto field : obj) {
        auto [it, fresh] = index.emplace(field.key, fields.size());
        if (fresh) fields.emplace_back(field.key, field.value);
        else fields[it->second].second = field.value;
      }
      out.push_back('{');
      for (size_t i = 0; i < fields.size(); ++i) {
        if (i) out += ", ";
        dumps_string(fields[i].first, out);
        out += ": ";
        python_json_dumps(fields[i].second, out);
      }
      out.push_back('}');
      return;
    }
    case element_type::ARRAY: {
      out.push_back('[');
      bool first = true;
      const simdjson::dom::array arr = value.get_array().value_unsafe();
      for (auto item : arr) {
        if (!first) out += ", ";
        first = false;
        python_json_dumps(item, out);
      }
      out.push_back(']');
      return;
    }
    case element_type::STRING: return dumps_string(value.get_string().value_unsafe(), out);
    case element_type::INT64: return void(out += std::to_string(value.get_int64().value_unsafe()));
    case element_type::UINT64: return void(out += std::to_string(value.get_uint64().value_unsafe()));
    case element_type::DOUBLE: return python_float_repr(value.get_double().value_unsafe(), out);
    case element_type::BOOL: return void(out += value.get_bool().value_unsafe() ? "true" : "false");
    case element_type::NULL_VALUE: return void(out += "null");
  }
  LOOM_ASSERT(false, "unknown simdjson element type");
}

}  // namespace loom::tokenize
