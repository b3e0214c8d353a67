#include "loom/error.h"

#include <cstring>

namespace loom::detail {

namespace {
const char* basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

// A failed CHECK is about the user's input or environment: the message is what they act on, and a
// source location would only be noise to them. The file and line stay in the signature for a
// debugger's breakpoint.
void throw_check(const char* /*file*/, int /*line*/, const char* cond, const std::string& msg) {
  if (msg.empty()) throw Error(concat("check failed: ", cond));
  throw Error(msg);
}

// A broken invariant is ours: the location is what we need to find it.
void throw_assert(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(concat("internal error: ", cond, " ", msg, " [", basename(file), ":", line,
                             "] (a bug in loom; please report it)"));
}

}  // namespace loom::detail
