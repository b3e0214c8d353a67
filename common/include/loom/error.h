// Two kinds of check, never mixed:
//   LOOM_CHECK(cond, parts...)   bad input or environment: throws loom::Error with the message parts
//                                (the condition when there are none), no source location: the user
//                                acts on the message. Callers catch it in main().
//   LOOM_ASSERT(cond, parts...)  a broken invariant of loom itself: throws loom::InternalError with
//                                the condition and [file:line], for the bug report.
//   LOOM_DASSERT(cond, parts...) LOOM_ASSERT in debug builds only, for hot loops.
// Only main() turns these into exit codes.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace loom {

// Bad input or environment: the user can fix it.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A bug in loom.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
[[noreturn]] void throw_check(const char* file, int line, const char* cond, const std::string& msg);
[[noreturn]] void throw_assert(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

// Formats any streamable parts into one string: loom::str("file ", path, " line ", n).
template <typename... Parts>
std::string str(const Parts&... parts) {
  return detail::concat(parts...);
}

}  // namespace loom

#define LOOM_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (__builtin_expect(!(cond), 0))                                                          \
      ::loom::detail::throw_check(__FILE__, __LINE__, #cond, ::loom::detail::concat(__VA_ARGS__)); \
  } while (0)

#define LOOM_ASSERT(cond, ...)                                                                  \
  do {                                                                                          \
    if (__builtin_expect(!(cond), 0))                                                           \
      ::loom::detail::throw_assert(__FILE__, __LINE__, #cond, ::loom::detail::concat(__VA_ARGS__)); \
  } while (0)

#ifdef NDEBUG
#define LOOM_DASSERT(cond, ...) \
  do {                          \
  } while (0)
#else
#define LOOM_DASSERT(cond, ...) LOOM_ASSERT(cond, __VA_ARGS__)
#endif

// Throws loom::Error with a message only (no condition text): for errors found by parsing, where
// the message already says everything ("a.jsonl:12: expected a string at key 'text'").
#define LOOM_FAIL(...) throw ::loom::Error(::loom::detail::concat(__VA_ARGS__))
