// loom-pack pack --seq-len L --strategy concat|bestfit [--seed S] --output-dir DIR INPUT... (loom or InternLM shards)
#include <chrono>
#include <cstdio>

#include "cmd_common.h"
#include "loom/log.h"
#include "loom/progress.h"
#include "loom/packer/convert.h"
#include "loom/packer/pack.h"

namespace loom::packer {

namespace {
// 16M tokens per pack: beyond any context length trained today; a pack is held in memory.
constexpr uint64_t kMaxSeqLen = uint64_t{1} << 24;
}  // namespace

int cmd_pack(const Args& args) {
  OptionParser parser("loom-pack pack",
                      "loom-pack pack --seq-len L [--strategy concat|bestfit] [--seed S] --output-dir DIR [--name NAME]\n"
                      "                      [--max-packs-per-shard K] [--threads N] [--model M.model | --vocab-size V] INPUT...");
  parser.options().add_options()("seq-len", po::value<std::string>(), "tokens per pack (L), 1 to 2^24")(
      "strategy", po::value<std::string>()->default_value("concat"), "concat or bestfit")(
      "seed", po::value<std::string>()->default_value("0"), "bestfit: shuffles the order of the packs")(
      "output-dir", po::value<std::string>(), "writes DIR/NAME.bin + .meta")(
      "name", po::value<std::string>()->default_value("packed"), "output name")(
      "max-packs-per-shard", po::value<std::string>()->default_value("0"),
      "roll the output into NAME-00000.bin, ... of at most this many packs each; 0: one file")(
      "threads", po::value<std::string>()->default_value("0"),
      "bestfit: cores to use, 1 to 1024 (packs gathered on N - 3 threads, at least 1); 0: all")(
      "model", po::value<std::string>()->default_value(""),
      "InternLM inputs: the SentencePiece model they were made with (vocab, bos/eos, fingerprint; as convert)")(
      "vocab-size", po::value<std::string>()->default_value("0"), "InternLM inputs without --model: the vocab size")(
      "inputs", po::value<std::vector<std::string>>(), "loom or InternLM token shards, or folders of them");
  parser.positional("inputs");
  if (!parse_command(parser, args)) return kExitOk;
  PackOptions o;
  required<std::string>(parser, "seq-len");
  o.seq_len = static_cast<uint32_t>(parser.get_uint("seq-len", 1, kMaxSeqLen));
  const std::string strategy = parser.get<std::string>("strategy");
  if (strategy == "concat") o.strategy = PackStrategy::kConcat;
  else if (strategy == "bestfit") o.strategy = PackStrategy::kBestfit;
  else throw UsageError(str("--strategy ", strategy, ": expected concat or bestfit"));
  o.seed = parser.get_uint("seed", 0, UINT64_MAX);
  o.output_dir = required<std::string>(parser, "output-dir");
  o.name = parser.get<std::string>("name");
  if (o.name.empty() || o.name.find('/') != std::string::npos) throw UsageError("--name must be a plain file name");
  o.max_packs_per_shard = parser.get_uint("max-packs-per-shard", 0, static_cast<uint64_t>(INT64_MAX));
  o.threads = static_cast<unsigned>(parser.get_uint("threads", 0, 1024));
  // InternLM shards are read through their loom conversion (convert --to loom), in a scratch folder
  // inside the output folder that is removed afterwards.
  ConvertOptions internlm;
  internlm.model = parser.get<std::string>("model");
  internlm.vocab_size = static_cast<uint32_t>(parser.get_uint("vocab-size", 0, UINT32_MAX));
  const std::vector<std::string> paths = input_shards(parser);
  std::vector<std::string> reads = shard_files(paths);
  if (!internlm.model.empty()) reads.push_back(internlm.model);
  check_pack_spares_inputs(reads, o);
  const InternlmAsLoom loom_inputs(paths, pack_scratch_parent(o), internlm);
  const ShardSet inputs(loom_inputs.paths());
  const auto t0 = std::chrono::steady_clock::now();
  const PackReport r = pack_shards(inputs, o);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  log::info("pack: ", strategy, ", seq_len ", o.seq_len, ": ", format_count(r.packs), " packs in ", r.outputs.size(),
            r.outputs.size() == 1 ? " file, " : " files, ", format_count(r.tokens), " tokens, ", format_count(r.padding_tokens),
            " padding tokens; padding ", format_percent(r.padding_fraction, 1.0), ", truncated documents ",
            format_percent(r.truncated_fraction, 1.0), " (", format_count(r.truncated_docs), " of ",
            format_count(r.documents), " non-empty documents) in ", format_number(took.count(), 2), " s");
  return kExitOk;
}

}  // namespace loom::packer
