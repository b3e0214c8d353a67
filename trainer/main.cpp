// loom-train: parses the configuration, runs the loop, turns errors into loom/cli.h's exit codes:
//   0  done (total_steps reached, or stopped by SIGTERM/SIGINT after saving a checkpoint)
//   1  bad input or environment (data, checkpoint, a failed peer rank, out of memory)
//   2  usage: an unknown option or key, a value that does not parse or is outside its range or limit
//   3  internal error (a bug in loom, or LibTorch refusing what loom asked of it)
//   4  hang: no step finished within monitor.hang_timeout (the watchdog ends the process)
//   137 (SIGKILL) only from the TEST ONLY debug.kill_* switches
// Subcommands: `loom-train export-hf ...` (docs/HF.md), `loom-train generate ...`, `loom-train plan ...`
// (the memory plan, docs/TRAIN.md), `loom-train --version`; anything else is a training run.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#if defined(LOOM_CUDA)
#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#endif
#if __has_include(<cudnn_version.h>)
#include <cudnn_version.h>
#endif
#if __has_include(<nccl.h>)
#include <nccl.h>
#endif
#endif

#include "config.h"
#include "generate.h"
#include "hf_export.h"
#include "hf_import.h"
#include "loom/build_info.h"
#include "loom/cli.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "loom/sys.h"
#include "plan_command.h"
#include "trainer.h"

namespace {

// The libraries this loom-train was compiled against, for --version: LibTorch always, and CUDA,
// cuDNN and NCCL in a LOOM_CUDA build (their headers' versions).
std::vector<std::pair<std::string, std::string>> library_versions() {
  std::vector<std::pair<std::string, std::string>> v{{"LibTorch", TORCH_VERSION}};
#if defined(LOOM_CUDA)
#if defined(CUDART_VERSION)
  v.emplace_back("CUDA", loom::str(CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10));
#else
  v.emplace_back("CUDA", "yes (cuda_runtime_api.h was not on the include path: version unknown)");
#endif
#if defined(CUDNN_MAJOR)
  v.emplace_back("cuDNN", loom::str(CUDNN_MAJOR, ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL));
#else
  v.emplace_back("cuDNN", "unknown (cudnn_version.h was not on the include path)");
#endif
#if defined(NCCL_MAJOR)
  v.emplace_back("NCCL", loom::str(NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH));
#else
  v.emplace_back("NCCL", "unknown (nccl.h was not on the include path)");
#endif
#else
  v.emplace_back("CUDA", "no (a CPU build; -DLOOM_CUDA=ON builds for CUDA devices, docs/GPU.md)");
#endif
  return v;
}

// Megatron-LM's command-line flags that loom translates (config.cpp) beyond the aliases the option
// list shows: the end of --help. docs/TRAIN.md, "Megatron-LM flags", has the whole table.
const char* const kMegatronHelp =
    "Megatron-LM flags translated on the command line (besides the aliases above; docs/TRAIN.md):\n"
    "  --data-path DIR | \"W1 P/A W2 P/B\"   data.train_folder (a folder of packed shards; a blend: its sub-folders,\n"
    "                                   data.dataset_weights, data.mixture=proportional)\n"
    "  --load DIR                         --resume auto with ckpt.save_ckpt_folder=DIR\n"
    "  --lr-decay-style cosine|constant   lr_scheduler.kind; WSD with --lr-wsd-decay-style linear and\n"
    "                                   --lr-wsd-decay-iters N: lr_scheduler.kind=wsd, lr_scheduler.decay_ratio\n"
    "  --override-opt_param-scheduler     lr_scheduler.on_resume=apply\n"
    "  --use-checkpoint-opt_param-scheduler  lr_scheduler.on_resume=keep\n"
    "  --valid-data-path, --split, --tokenizer-model: refused, each naming the loom way\n";

// --flag's spelling with '-' for '_' and the value after '=' cut off: "--data-path".
std::string flag_name(const std::string& arg) {
  std::string n = arg.substr(0, arg.find('='));
  std::replace(n.begin(), n.end(), '_', '-');
  return n;
}

// The words of --data-path (argparse's nargs='*': up to the next flag, each argument maybe several
// words), as config.cpp reads them.
std::vector<std::string> data_path_words(const std::vector<std::string>& args, size_t i) {
  std::vector<std::string> words;
  const size_t eq = args[i].find('=');
  std::vector<std::string> values;
  if (eq != std::string::npos) values.push_back(args[i].substr(eq + 1));
  for (size_t j = i + 1; eq == std::string::npos && j < args.size() && args[j].rfind("--", 0) != 0; ++j)
    values.push_back(args[j]);
  for (const std::string& v : values) {
    size_t b = 0;
    while ((b = v.find_first_not_of(" \t", b)) != std::string::npos) {
      const size_t e = v.find_first_of(" \t", b);
      words.push_back(v.substr(b, e == std::string::npos ? std::string::npos : e - b));
      b = e;
    }
  }
  return words;
}

// A Megatron-LM dataset prefix (PREFIX.bin + PREFIX.idx, or one of the two named), else "".
std::string megatron_prefix(const std::string& word) {
  std::string prefix = word;
  if (prefix.size() > 4 && (prefix.compare(prefix.size() - 4, 4, ".bin") == 0 ||
                            prefix.compare(prefix.size() - 4, 4, ".idx") == 0))
    prefix.resize(prefix.size() - 4);
  if (loom::sys::is_directory(word) || !loom::sys::exists(prefix + ".idx") || !loom::sys::exists(prefix + ".bin"))
    return "";
  return prefix;
}

// --data-path naming Megatron-LM datasets: refused with the loom-pack commands that make packed
// shards of them and the --data-path that then reads those.
void refuse_megatron_datasets(const std::vector<std::string>& words) {
  const bool blend = words.size() > 1;
  std::string commands, data_path;
  bool any = false;
  for (size_t i = blend ? 1 : 0; i < words.size(); i += blend ? 2 : 1) {
    const std::string prefix = megatron_prefix(words[i]);
    any = any || !prefix.empty();
    const std::string name = loom::sys::basename(prefix.empty() ? words[i] : prefix);
    const std::string out = blend ? "packed/train/" + name : "packed/train";
    if (!prefix.empty())
      commands += "    loom-pack pack --seq-len SEQ_LEN --model TOKENIZER.model --output-dir " + out + " " + prefix + "\n";
    data_path += (data_path.empty() ? "" : " ") + (blend ? words[i - 1] + " " + out : out);
  }
  if (!any) return;
  throw loom::UsageError(loom::str(
      "loom-train: --data-path names Megatron-LM's indexed dataset (PREFIX.bin + PREFIX.idx); loom-train reads "
      "packed shards, fixed-length sequences that keep document boundaries (docs/PACK.md). Pack it first:\n",
      commands, "    loom-train ... --data-path ", blend ? "\"" + data_path + "\"" : data_path,
      "\n(SEQ_LEN: the run's data.seq_len; --model, the SentencePiece model the dataset was made with, or "
      "--vocab-size V)"));
}

// --split TRAIN,VALID,TEST (Megatron-LM's weights, ',' or '/' between them): loom splits the token
// shards before packing, and validation reads a folder of its own. Refused with the command, at the
// share of VALID given (5% where the value does not parse).
void refuse_split(const std::vector<std::string>& args, size_t i) {
  const size_t eq = args[i].find('=');
  const std::string value = eq != std::string::npos ? args[i].substr(eq + 1) : i + 1 < args.size() ? args[i + 1] : "";
  std::vector<double> weights;
  for (size_t b = 0; b <= value.size();) {
    const size_t e = std::min(value.find_first_of(",/", b), value.size());
    char* end = nullptr;
    const std::string w = value.substr(b, e - b);
    const double x = std::strtod(w.c_str(), &end);
    if (w.empty() || *end != '\0' || !(x >= 0)) break;
    weights.push_back(x);
    b = e + 1;
  }
  double sum = 0;
  for (double w : weights) sum += w;
  const double valid = weights.size() >= 2 && sum > 0 ? weights[1] / sum : 0.05;
  throw loom::UsageError(loom::str(
      "loom-train: --split ", value, ": loom-train does not split a dataset at start; validation reads a folder of "
      "its own, data.valid_folder. Split the token shards before packing (", loom::format_number(100 * valid, 3),
      "% to validation; a test share has no loom counterpart):\n"
      "    loom-pack split --valid-fraction ", loom::format_number(valid, 6), " --output-dir split SHARD.bin\n"
      "then pack split/train and split/valid apart and give --data.train_folder and --data.valid_folder"));
}

// Megatron-LM flags that loom does not translate but knows the way for: refused with it, before
// the parse would call them unknown keys.
void refuse_untranslated_megatron_flags(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string n = flag_name(args[i]);
    if (n == "--data-path") refuse_megatron_datasets(data_path_words(args, i));
    if (n == "--split") refuse_split(args, i);
    if (n == "--valid-data-path")
      throw loom::UsageError(
          "loom-train: --valid-data-path: give --data.valid_folder=DIR, a folder of packed shards made as those "
          "of --data-path (loom-pack pack)");
    if (n == "--tokenizer-model")
      throw loom::UsageError(
          "loom-train: --tokenizer-model: give --data.tokenizer=M.model; loom-train checks it against the shards' "
          "tokenizer fingerprint and copies it into every checkpoint");
  }
}

int run(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "export-hf") return loom::hf::run_export_hf({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "generate") return loom::run_generate({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "plan") return loom::run_plan({args.begin() + 1, args.end()});
  // A training run takes options only: a first word that is not one is a mistyped subcommand.
  if (!args.empty() && !args[0].empty() && args[0][0] != '-')
    throw loom::UsageError("loom-train: unknown subcommand '" + args[0] + "' (subcommands: plan, export-hf, generate; "
                           "a training run takes --config FILE.ini and --section.key=value options; see loom-train --help)");
  refuse_untranslated_megatron_flags(args);
  auto config = loom::parse_train_config(args);
  if (!config) {  // --help, printed
    std::cout << "\n" << kMegatronHelp;
    return loom::kExitOk;
  }
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
  if (loom::wants_version(args)) {
    std::cout << loom::version_text("loom-train", library_versions());
    return loom::kExitOk;
  }
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
