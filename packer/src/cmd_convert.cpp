// loom-pack convert --to loom|internlm|megatron --output-dir DIR [--model M.model] INPUT...
#include "cmd_common.h"
#include "loom/count_text.h"
#include "loom/log.h"
#include "loom/packer/convert.h"

namespace loom::packer {

int cmd_convert(const Args& args) {
  OptionParser parser("loom-pack convert", "loom-pack convert --to loom|internlm|megatron --output-dir DIR "
                                          "[--model M.model | --vocab-size V] INPUT...");
  parser.options().add_options()("to", po::value<std::string>(), "target format: loom (from InternLM or Megatron-LM), internlm or megatron (from loom)")(
      "output-dir", po::value<std::string>(), "writes DIR/NAME.bin for each input NAME.bin")(
      "model", po::value<std::string>()->default_value(""),
      "--to loom: the SentencePiece model the shard was made with (vocab, bos/eos, fingerprint)")(
      "vocab-size", po::value<std::string>()->default_value("0"), "--to loom without --model: the vocab size")(
      "inputs", po::value<std::vector<std::string>>(), "shards or folders");
  parser.positional("inputs");
  if (!parse_command(parser, args)) return kExitOk;
  ConvertOptions o;
  const std::string to = required<std::string>(parser, "to");
  if (to == "loom") o.to = ConvertTarget::kLoom;
  else if (to == "internlm") o.to = ConvertTarget::kInternlm;
  else if (to == "megatron") o.to = ConvertTarget::kMegatron;
  else throw UsageError(str("--to ", to, ": expected loom, internlm or megatron"));
  o.output_dir = required<std::string>(parser, "output-dir");
  o.model = parser.get<std::string>("model");
  o.vocab_size = static_cast<uint32_t>(parser.get_uint("vocab-size", 0, UINT32_MAX));
  const ConvertReport r = convert_shards(input_shards(parser), o);
  log::info("convert: ", counted(r.files, "shard"), " to ", to, " under ", o.output_dir, ": ",
            counted(r.documents, "document"), ", ", counted(r.tokens, "token"));
  return kExitOk;
}

}  // namespace loom::packer
