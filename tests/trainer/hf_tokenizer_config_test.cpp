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

TEST_CASE("spm exported tokenizer_config loads as LlamaTokenizer in transformers 4 and 5", "[spm]") {
  // transformers 4's AutoTokenizer refuses a tokenizer_class it does not know (5's SentencePieceBackend);
  // LlamaTokenizer is known to both. Every key must be one LlamaTokenizer(Fast).__init__ of 4.x takes
  // (or PreTrainedTokenizerBase's model_max_length), none of 5's alone (special_tokens_pattern).
  const auto config_of = [](const std::string& model) {
    for (const auto& [name, text] : hf::tokenizer_files(spm::read_spm_model(model), model, 512))
      if (name == "tokenizer_config.json") return text;
    FAIL("no tokenizer_config.json");
    return std::string();
  };
  struct Case {
    std::string model;
    bool prefix;  // the model's add_dummy_prefix
  };
  for (const Case& c : {Case{corpus("internlm_v7.model"), false}, Case{corpus("spm_test_unigram_1k.model"), true},
                        Case{test::source_dir() + "/data_samples/spm_2k.model", true}}) {
    INFO(c.model);
    const std::string cfg = config_of(c.model);
    CHECK_THAT(cfg, Contains(std::string("\"tokenizer_class\": \"LlamaTokenizer\",\n  \"add_prefix_space\": ") +
                             (c.prefix ? "true" : "false") + ",\n"));
    CHECK_THAT(cfg, Contains("\"legacy\": true"));
    CHECK_THAT(cfg, Contains("\"add_bos_token\": true"));
    CHECK_THAT(cfg, Contains("\"model_max_length\": 512"));
    test::TempDir dir("hf_tok_cfg");
    test::write_all(dir / "tokenizer_config.json", cfg);
    const std::string check = R"PY(
import json, sys
c = json.load(open(sys.argv[1]))
llama4 = {"vocab_file", "tokenizer_file", "unk_token", "bos_token", "eos_token", "pad_token", "sp_model_kwargs",
          "add_bos_token", "add_eos_token", "clean_up_tokenization_spaces", "use_default_system_prompt",
          "spaces_between_special_tokens", "legacy", "add_prefix_space"}
extra = sorted(set(c) - llama4 - {"tokenizer_class", "model_max_length"})
print(c["tokenizer_class"], c["unk_token"], c["bos_token"], c["eos_token"], c["pad_token"], extra)
)PY";
    test::write_all(dir / "check.py", check);
    const test::RunResult r =
        test::run(test::python() + " " + test::quote(dir / "check.py") + " " + test::quote(dir / "tokenizer_config.json"));
    REQUIRE(r.exit_code == 0);
    CHECK(r.output == "LlamaTokenizer <unk> <s> </s> None []\n");
  }
}
