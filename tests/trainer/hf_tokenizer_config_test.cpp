// The tokenizer files loom-train exports for Hugging Face (hf_tokenizer.h): tokenizer_config.json names
// the transformers class that encodes each of the three models exactly as SentencePiece does.
#include <catch2/catch.hpp>

#include <string>

#include "hf_tokenizer.h"
#include "loom/spm_model.h"
#include "test_util.h"

using namespace loom;
using Catch::Matchers::Contains;

namespace {
std::string corpus(const std::string& name) { return test::test_data_dir() + "/" + name; }
}  // namespace

TEST_CASE("spm exported tokenizer_config names the transformers class that encodes like SentencePiece", "[spm]") {
  // Measured with transformers 5.17 (bench/hf/check_logits.py --tokenizer-only): its LlamaTokenizer is a
  // BPE without the charsmap, exact only for a plain BPE model; the rest goes to SentencePieceBackend.
  const auto config_of = [](const std::string& model) {
    for (const auto& [name, text] : hf::tokenizer_files(spm::read_spm_model(model), model, 512))
      if (name == "tokenizer_config.json") return text;
    FAIL("no tokenizer_config.json");
    return std::string();
  };
  const std::string internlm = config_of(corpus("internlm_v7.model"));
  CHECK_THAT(internlm, Contains("\"tokenizer_class\": \"LlamaTokenizer\",\n  \"add_prefix_space\": false,\n"));
  CHECK_THAT(internlm, Contains("\"legacy\": true"));
  CHECK_THAT(internlm, !Contains("special_tokens_pattern"));
  for (const std::string& model : {corpus("spm_test_unigram_1k.model"), test::source_dir() + "/data_samples/spm_2k.model"}) {
    const std::string cfg = config_of(model);
    INFO(model);
    CHECK_THAT(cfg, Contains("\"tokenizer_class\": \"SentencePieceBackend\",\n  \"special_tokens_pattern\": \"bos\",\n"));
    CHECK_THAT(cfg, Contains("\"legacy\": true"));
    CHECK_THAT(cfg, !Contains("add_prefix_space"));
  }
}
