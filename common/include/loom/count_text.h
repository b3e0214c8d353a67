// A count with its noun, for lines people read: "1 file", "2 files", "1,949,264 tokens",
// "1 thread". The number is format_count's (loom/progress.h: thousands separators), the noun
// singular for exactly 1 and plural otherwise (0 files). Files and JSON keep plain numbers.
#pragma once

#include <string>
#include <type_traits>

#include "loom/progress.h"

namespace loom {

// plural: the noun for every count but 1; empty means singular + "s".
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
std::string counted(Int n, const std::string& singular, const std::string& plural = "") {
  const bool one = n == static_cast<Int>(1);
  return format_count(n) + " " + (one ? singular : plural.empty() ? singular + "s" : plural);
}

}  // namespace loom
