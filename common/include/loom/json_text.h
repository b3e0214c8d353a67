// JSON text helpers for the small JSON files loom writes by hand (safetensors headers, configs).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace loom {

// s as a JSON string literal: quotes, backslashes and control characters escaped; UTF-8 passes through.
inline std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// The shortest text that reads back as exactly v (std::to_chars); null for inf/NaN, which JSON lacks.
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace loom
