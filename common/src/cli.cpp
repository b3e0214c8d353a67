#include "loom/cli.h"

#include <exception>
#include <new>

#include "loom/log.h"

namespace loom {

const char* exit_codes_help() {
  return "Exit codes: 0 ok, 1 bad input or failed check, 2 usage error, 3 internal error, 4 hang (loom-train's "
         "watchdog)";
}

int run_main(const std::string& prefix, const std::function<int()>& body) {
  // Most derived first: UsageError is an Error.
  try {
    return body();
  } catch (const UsageError& e) {
    log::error(prefix, e.what());
    return kExitUsage;
  } catch (const Error& e) {
    log::error(prefix, e.what());
    return kExitFailed;
  } catch (const InternalError& e) {
    log::error(prefix, e.what());
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    // Memory is the environment's limit, not a bug: a smaller input or more memory fixes it.
    log::error(prefix, "out of memory");
    return kExitFailed;
  } catch (const std::exception& e) {
    log::error(prefix, e.what());
    return kExitInternal;
  } catch (...) {
    log::error(prefix, "internal error: an exception that is not a std::exception");
    return kExitInternal;
  }
}

}  // namespace loom
