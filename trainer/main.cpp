// loom-train: parses the configuration, runs the loop, turns errors into loom/cli.h's exit codes:
//   0  done (total_steps reached, or stopped by SIGTERM/SIGINT after saving a checkpoint)
//   1  bad input or environment (config values, data, checkpoint, a failed peer rank, out of memory)
//   2  usage: an unknown option or key, a value that does not parse
//   3  internal error (a bug in loom, or LibTorch refusing what loom asked of it)
//   4  hang: no step finished within monitor.hang_timeout (the watchdog ends the process)
//   137 (SIGKILL) only from the TEST ONLY debug.kill_* switches
// Subcommands: `loom-train export-hf ...` (docs/HF.md), `loom-train generate ...`, `loom-train plan ...`
// (the memory plan, docs/TRAIN.md); anything else is a training run.
#include <string>
#include <vector>

#include "config.h"
#include "generate.h"
#include "hf_export.h"
#include "hf_import.h"
#include "loom/cli.h"
#include "loom/error.h"
#include "loom/log.h"
#include "plan_command.h"
#include "trainer.h"

namespace {

int run(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "export-hf") return loom::hf::run_export_hf({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "generate") return loom::run_generate({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "plan") return loom::run_plan({args.begin() + 1, args.end()});
  // A training run takes options only: a first word that is not one is a mistyped subcommand.
  if (!args.empty() && !args[0].empty() && args[0][0] != '-')
    throw loom::UsageError("loom-train: unknown subcommand '" + args[0] + "' (subcommands: plan, export-hf, generate; "
                           "a training run takes --config FILE.ini and --section.key=value options; see loom-train --help)");
  auto config = loom::parse_train_config(args);
  if (!config) return loom::kExitOk;
  loom::WeightInit init_weights;
  if (!config->flags.init_from_hf.empty())
    init_weights = [dir = config->flags.init_from_hf](loom::InternLMImpl& model) {
      loom::hf::init_from_hf(model, dir);
      loom::log::info("initialised the weights from the Hugging Face folder ", dir);
    };
  loom::train(*config, init_weights);
  return loom::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return loom::run_main("", [&] {
    // LibTorch's errors carry a C++ backtrace in what(): keep the message. Running out of device or
    // host memory is the environment (code 1); any other LibTorch error means loom misused it.
    try {
      return run(args);
    } catch (const c10::OutOfMemoryError& e) {
      throw loom::Error(std::string("out of memory: ") + e.what_without_backtrace());
    } catch (const c10::Error& e) {
      throw loom::InternalError(std::string("LibTorch: ") + e.what_without_backtrace());
    }
  });
}
