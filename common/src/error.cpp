#include "loom/error.h"

#include <cstring>

namespace loom::detail {

namespace {
const char* basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

// The message comes first: it is what the user acts on; the source location is for us.
void throw_check(const char* file, int line, const char* cond, const std::string& msg) {
  if (msg.empty()) throw Error(concat("check failed: ", cond, " [", basename(file), ":", line, "]"));
  throw Error(concat(msg, " [", basename(file), ":", line, "]"));
}

void throw_assert(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(concat("internal error: ", cond, " ", msg, " [", basename(file), ":", line,
                             "] (a bug in loom; please report it)"));
}

}  // namespace loom::detail
