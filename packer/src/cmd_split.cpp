// loom-pack split --valid-fraction F [--min-valid-docs M]|--valid-docs N --seed S --output-dir DIR INPUT...
#include "cmd_common.h"
#include "loom/count_text.h"
#include "loom/log.h"
#include "loom/packer/split.h"

namespace loom::packer {

int cmd_split(const Args& args) {
  OptionParser parser("loom-pack split",
                      "loom-pack split (--valid-fraction F [--min-valid-docs M] | --valid-docs N) [--seed S] "
                      "--output-dir DIR INPUT...");
  parser.options().add_options()("valid-fraction", po::value<std::string>(), "each document goes to valid with this probability")(
      "valid-docs", po::value<std::string>(), "exactly this many documents go to valid")(
      "min-valid-docs", po::value<std::string>(),
      "with --valid-fraction: at least this many documents go to valid (train keeps at least one)")(
      "seed", po::value<std::string>()->default_value("0"), "the split's seed")(
      "output-dir", po::value<std::string>(), "writes DIR/train/NAME.bin and DIR/valid/NAME.bin")(
      "inputs", po::value<std::vector<std::string>>(), "loom shards or folders");
  parser.positional("inputs");
  if (!parse_command(parser, args)) return kExitOk;
  SplitOptions o;
  const bool by_fraction = parser.vm().count("valid-fraction") > 0, by_docs = parser.vm().count("valid-docs") > 0;
  if (by_fraction == by_docs) throw UsageError("give exactly one of --valid-fraction and --valid-docs");
  if (by_fraction) o.valid_fraction = parser.get_double("valid-fraction", 0.0, 1.0);
  if (by_docs) o.valid_docs = parser.get_int("valid-docs", 0, INT64_MAX);
  if (parser.vm().count("min-valid-docs")) {
    if (!by_fraction) throw UsageError("--min-valid-docs goes with --valid-fraction");
    o.min_valid_docs = parser.get_int("min-valid-docs", 0, INT64_MAX);
  }
  o.seed = parser.get_uint("seed", 0, UINT64_MAX);
  o.output_dir = required<std::string>(parser, "output-dir");
  const std::vector<std::string> paths = input_shards(parser);
  const ShardSet inputs(paths);
  const SplitReport r = split_shards(inputs, paths, o);
  log::info("split: train ", counted(r.train_docs, "document"), " (", counted(r.train_tokens, "token"), "), valid ",
            counted(r.valid_docs, "document"), " (", counted(r.valid_tokens, "token"), ") under ", o.output_dir);
  return kExitOk;
}

}  // namespace loom::packer
