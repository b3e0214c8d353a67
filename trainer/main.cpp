// loom-train: parses the configuration, runs the loop, turns errors into exit codes.
//   0  done (total_steps reached, or stopped by SIGTERM/SIGINT after saving a checkpoint)
//   1  bad input or environment (loom::Error: config, data, checkpoint)
//   2  internal error (a bug in loom)
//   3  other failure (LibTorch error, out of memory)
#include <exception>
#include <iostream>

#include "config.h"
#include "loom/error.h"
#include "loom/log.h"
#include "trainer.h"

int main(int argc, char** argv) {
  try {
    auto config = loom::parse_train_config(std::vector<std::string>(argv + 1, argv + argc));
    if (!config) return 0;
    loom::train(*config);
    return 0;
  } catch (const loom::Error& e) {
    loom::log::error(e.what());
    return 1;
  } catch (const loom::InternalError& e) {
    loom::log::error("internal error: ", e.what());
    return 2;
  } catch (const c10::Error& e) {
    loom::log::error("LibTorch: ", e.what_without_backtrace());
    return 3;
  } catch (const std::exception& e) {
    loom::log::error(e.what());
    return 3;
  }
}
