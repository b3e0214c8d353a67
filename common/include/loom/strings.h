// String helpers every stage shares.
#pragma once

#include <string_view>

namespace loom {

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace loom
