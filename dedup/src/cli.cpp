#include "loom/dedup/cli.h"

#include <cmath>

#include "loom/cli.h"
#include "loom/dedup/dedup.h"
#include "loom/dedup/sources.h"
#include "loom/log.h"
#include "loom/options.h"

namespace loom::dedup {

namespace {
void declare(OptionParser& p, bool& near, bool& verify) {
  p.options().add_options()
      ("inputs", po::value<std::vector<std::string>>(), "input shards (positional): loom, InternLM or Megatron, files or folders")
      ("output-dir", po::value<std::string>(), "the deduplicated shards: DIR/NAME.bin per input NAME.bin, same format")
      ("work-dir", po::value<std::string>(), "intermediate files, the report (report.jsonl) and summary (summary.json)")
      ("reference", po::value<std::vector<std::string>>(), "a reference set (repeatable): removes its duplicates from the inputs, never written")
      ("stage", po::value<std::string>()->default_value("all"), "all, signatures, buckets, clusters or apply (docs/DEDUP.md)")
      ("task", po::value<std::string>()->default_value("0"), "this process's task, 0 to --tasks - 1")
      ("tasks", po::value<std::string>()->default_value("1"), "the stage's number of tasks (signatures and apply: sources round-robin; buckets: bands)")
      ("ngram", po::value<std::string>()->default_value("5"), "MinHash shingle size, in tokens")
      ("bands", po::value<std::string>()->default_value("14"), "LSH bands")
      ("rows", po::value<std::string>()->default_value("8"), "hashes per band (bands x rows hashes in all)")
      ("seed", po::value<std::string>()->default_value("1"), "seed of the hash permutations")
      ("near", value_with_default(&near, true)->implicit_value(true, "true"), "near duplicates (MinHash); --near=false: exact duplicates only")
      ("keep", po::value<std::string>()->default_value("first"), "first: keep each cluster's first document; none: remove every member")
      ("verify", value_with_default(&verify, false)->implicit_value(true, "true"), "keep a candidate pair only at an exact n-gram Jaccard >= --threshold")
      ("threshold", po::value<std::string>()->default_value("0.7"), "the exact Jaccard --verify requires")
      ("eval", po::value<std::vector<std::string>>(), "evaluation texts (repeatable): .txt, .json, .jsonl")
      ("eval-key", po::value<std::string>()->default_value("text"), "the key of an evaluation record's text")
      ("eval-ngram", po::value<std::string>()->default_value("13"), "documents sharing an n-gram of this many tokens with an evaluation text are contaminated")
      ("decontaminate", po::value<std::string>()->default_value("remove"), "remove or report contaminated documents")
      ("model", po::value<std::string>(), "the SentencePiece model of the shards (tokenizes --eval; checked against the shards)")
      ("threads", po::value<std::string>()->default_value("1"), "threads, 1 to 1024")
      ("memory-mb", po::value<std::string>()->default_value("1024"), "the external sorts' buffers, in MiB");
  p.positional("inputs");
}

std::vector<std::string> list_option(const OptionParser& p, const std::string& key) {
  return p.vm().count(key) ? p.get<std::vector<std::string>>(key) : std::vector<std::string>{};
}

Stage parse_stage(const std::string& s) {
  if (s == "all") return Stage::kAll;
  if (s == "signatures") return Stage::kSignatures;
  if (s == "buckets") return Stage::kBuckets;
  if (s == "clusters") return Stage::kClusters;
  if (s == "apply") return Stage::kApply;
  throw UsageError(str("--stage: '", s, "' is not one of all, signatures, buckets, clusters, apply"));
}

std::string required(const OptionParser& p, const std::string& key) {
  if (!p.vm().count(key)) throw UsageError(str("missing --", key, " (see --help)"));
  return p.get<std::string>(key);
}
}  // namespace

int dedup_main(const std::vector<std::string>& args) {
  OptionParser p("loom-dedup", "loom-dedup --work-dir W --output-dir O [--stage S --task I --tasks N] INPUT...");
  DedupOptions o;
  declare(p, o.near, o.verify);
  if (!p.parse(args)) return kExitOk;
  const std::vector<std::string> inputs = list_option(p, "inputs");
  if (inputs.empty()) throw UsageError("no input given (see --help)");
  o.work_dir = required(p, "work-dir");
  o.output_dir = required(p, "output-dir");
  const Stage stage = parse_stage(p.get<std::string>("stage"));
  StageTask task;
  task.tasks = static_cast<uint32_t>(p.get_uint("tasks", 1, 1u << 20));
  task.task = static_cast<uint32_t>(p.get_uint("task", 0, task.tasks - 1));
  if (task.tasks > 1 && (stage == Stage::kAll || stage == Stage::kClusters))
    throw UsageError("--tasks > 1 needs --stage signatures, buckets or apply (clusters and all run as one task)");
  o.minhash.ngram = static_cast<uint32_t>(p.get_uint("ngram", 1, 1024));
  o.minhash.bands = static_cast<uint32_t>(p.get_uint("bands", 1, 1024));
  o.minhash.rows = static_cast<uint32_t>(p.get_uint("rows", 1, 1024));
  o.minhash.seed = p.get_uint("seed", 0, UINT64_MAX);
  const std::string keep = p.get<std::string>("keep");
  if (keep != "first" && keep != "none") throw UsageError(str("--keep: '", keep, "' is not one of first, none"));
  o.keep = keep == "first" ? Keep::kFirst : Keep::kNone;
  o.threshold = p.get_double("threshold", 0.0, 1.0);
  o.eval.files = list_option(p, "eval");
  o.eval.key = p.get<std::string>("eval-key");
  o.eval.ngram = static_cast<uint32_t>(p.get_uint("eval-ngram", 1, 1024));
  if (p.vm().count("model")) o.eval.model = p.get<std::string>("model");
  if (!o.eval.files.empty() && o.eval.model.empty()) throw UsageError("--eval needs --model (the shards' SentencePiece model)");
  const std::string dec = p.get<std::string>("decontaminate");
  if (dec != "remove" && dec != "report") throw UsageError(str("--decontaminate: '", dec, "' is not one of remove, report"));
  o.remove_contaminated = dec == "remove";
  o.threads = static_cast<uint32_t>(p.get_uint("threads", 1, 1024));
  o.memory_bytes = p.get_uint("memory-mb", 1, uint64_t{1} << 30) << 20;
  std::string ini = p.changed_ini();
  if (!ini.empty() && ini.back() == '\n') ini.pop_back();
  log::info("configuration (what differs from the defaults):\n", ini.empty() ? "(all defaults)" : ini);
  o.inputs = expand_shard_paths(inputs);
  o.references = list_option(p, "reference");
  if (!o.references.empty()) o.references = expand_shard_paths(o.references);
  run_stage(o, stage, task);
  return kExitOk;
}

}  // namespace loom::dedup
