// loom-pack verify [--deep] [--vocab-size N] PATH...
#include <iostream>

#include "cmd_common.h"
#include "loom/count_text.h"
#include "loom/log.h"
#include "loom/packer/verify.h"

namespace loom::packer {

int cmd_verify(const Args& args) {
  OptionParser parser("loom-pack verify",
                      "loom-pack verify [--deep] [--vocab-size N] PATH...  (files, or folders of *.bin + .meta)");
  parser.options().add_options()(
      "deep", po::bool_switch(), "also check every token id < vocab and the .bin checksum (one pass over the data)")(
      "vocab-size", po::value<std::string>()->default_value("0"),
      "with --deep, every id must be below it (any kind of shard; InternLM shards record no vocab); 0: none")(
      "inputs", po::value<std::vector<std::string>>(), "shards or folders");
  parser.positional("inputs");
  if (!parse_command(parser, args)) return kExitOk;
  const std::vector<std::string> paths = input_shards(parser);
  VerifyOptions options;
  options.deep = parser.get<bool>("deep");
  options.vocab_size = static_cast<uint32_t>(parser.get_uint("vocab-size", 0, UINT32_MAX));
  if (options.vocab_size && !options.deep) throw UsageError("--vocab-size checks token ids, which only --deep reads");

  uint64_t total = 0;
  for (const auto& p : paths) total += verify_bytes(p);
  Progress progress(options.deep ? "verify --deep" : "verify", options.deep ? total : 0);
  size_t failed = 0;
  uint64_t docs = 0, packs = 0, tokens = 0;  // documents of token shards, packs of packed shards
  for (const auto& p : paths) {
    const VerifyResult r = verify_shard(p, options, &progress);
    if (r.ok) {
      (r.kind == "packed" ? packs : docs) += r.documents;
      tokens += r.tokens;
      std::cout << "OK   " << p << " (" << r.kind << ", " << r.documents << (r.kind == "packed" ? " packs, " : " documents, ")
                << r.tokens << " tokens)\n";
    } else {
      ++failed;
      std::cout << "FAIL " << r.error << "\n";
    }
  }
  progress.finish();
  std::cout << "verify" << (options.deep ? " --deep" : "") << ": " << paths.size() << " shards, "
            << paths.size() - failed << " passed, " << failed << " failed\n";
  std::cout.flush();
  const std::string units = !packs  ? counted(docs, "document")
                            : !docs ? counted(packs, "pack")
                                    : counted(docs, "document") + ", " + counted(packs, "pack");
  log::info("verify: ", units, " and ", counted(tokens, "token"), " in the shards that passed, ",
            format_duration(progress.elapsed_s()));
  return failed ? kExitFailed : kExitOk;
}

}  // namespace loom::packer
