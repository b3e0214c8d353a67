// loom-train: parses the configuration, runs the loop, turns errors into exit codes.
//   0  done (total_steps reached, or stopped by SIGTERM/SIGINT after saving a checkpoint)
//   1  bad input or environment (loom::Error: config, data, checkpoint)
//   2  internal error (a bug in loom)
//   3  other failure (LibTorch error, out of memory)
//   4  hang: no step finished within monitor.hang_timeout (watchdog.h ends the process)
//   137 (SIGKILL) only from the TEST ONLY debug.kill_* switches
// Subcommands: `loom-train export-hf ...` (docs/HF.md), `loom-train generate ...`; anything else is
// a training run.
#include <exception>
#include <iostream>

#include "config.h"
#include "generate.h"
#include "hf_export.h"
#include "hf_import.h"
#include "loom/error.h"
#include "loom/log.h"
#include "trainer.h"

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args[0] == "export-hf") return loom::hf::run_export_hf({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "generate") return loom::run_generate({args.begin() + 1, args.end()});
    auto config = loom::parse_train_config(args);
    if (!config) return 0;
    loom::WeightInit init_weights;
    if (!config->loop.init_from_hf.empty())
      init_weights = [dir = config->loop.init_from_hf](loom::InternLMImpl& model) {
        loom::hf::init_from_hf(model, dir);
        loom::log::info("initialised the weights from the Hugging Face folder ", dir);
      };
    loom::train(*config, init_weights);
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
