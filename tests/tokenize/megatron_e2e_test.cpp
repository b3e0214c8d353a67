// loom-tokenize under Megatron-LM's tools/preprocess_data.py command lines: each SentencePiece
// tokenizer type on two models (uint16 and int32 ids) against megatron_reference.py, an independent
// Python reference of Megatron's tokenizer types and IndexedDatasetBuilder, byte for byte; and the
// refusals of what loom does not reproduce.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>

#include "run_checks.h"
#include "tok_test_util.h"

using namespace loom::test;

namespace {
std::string q(const std::string& s) { return quote(s); }
std::string megatron_py() { return q(python()) + " " + q(source_dir() + "/tests/tokenize/megatron_reference.py"); }

template <typename T>
T at(const std::string& bytes, size_t offset) {
  T v;
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

// corpus.json, Megatron's "loose json" (one record a line): the first 400 lines of botchan.txt as
// "text" (blank lines are empty texts), a title, and texts around SentencePieceTokenizer's special
// strings (two at one place, one at the very start and end, and the model's own <s> and </s>).
constexpr int kBotchanLines = 400;
const char* const kSpecialTexts[] = {"<EOD>", "a<EOD>b", "<CLS><SEP>x <MASK> y<PAD>", "Hello </s> and <s>there<EOD>",
                                     "<BOS><EOS><EOD><EOD>", "   ", "no special <EO D> here"};
void make_corpus(const TempDir& dir) {
  std::string specials = "[";
  for (const char* t : kSpecialTexts) specials += std::string("r'''") + t + "''', ";
  require_ok(python_code(dir, "import json\n"
                              "lines = open(" + std::string("r'''") + corpus("botchan.txt") + "''', encoding='utf-8').read().split('\\n')[:" +
                              std::to_string(kBotchanLines) + "]\n"
                              "texts = lines + " + specials + "]\n"
                              "with open(r'''" + dir / "corpus.json" + "''', 'w') as f:\n"
                              "    for i, t in enumerate(texts):\n"
                              "        f.write(json.dumps({'text': t, 'title': 'Document %d: ' % i + t[:12]}) + '\\n')\n"));
}
constexpr size_t kDocs = kBotchanLines + sizeof(kSpecialTexts) / sizeof(kSpecialTexts[0]);
}  // namespace

TEST_CASE("preprocess_data.py command lines write Megatron's dataset byte for byte, each SentencePiece type",
          "[tokenize][e2e][megatron]") {
  TempDir dir("tok_megatron");
  make_corpus(dir);
  struct Model {
    std::string path;
    uint8_t dtype_code;         // uint16 (8) below 65,500 pieces, else int32 (4)
    uint32_t sentencepiece_eod;  // <EOD>: the first id after the model's pieces and <CLS>, <SEP>
  };
  const Model models[] = {{corpus("spm_test_unigram_1k.model"), 8, 1002}, {internlm_model(), 4, 103170}};
  for (const Model& m : models) {
    for (const std::string type : {"GPTSentencePieceTokenizer", "SentencePieceTokenizer", "Llama2Tokenizer"}) {
      SECTION(m.path + " " + type) {
        // A real preprocess_data.py command line, every flag of its README spelt as there.
        require_ok(tokenize("--input " + q(dir / "corpus.json") + " --output-prefix " + q(dir / "out/corpus") +
                            " --json-keys text title --tokenizer-type " + type + " --tokenizer-model " + q(m.path) +
                            " --dataset-impl mmap --workers 2 --append-eod --partitions 2 --keep-sequential-samples"
                            " --log-interval 100 --keep-newlines 2>&1"));
        for (const std::string key : {"text", "title"}) {
          const std::string ours = dir / ("out/corpus_" + key + "_document"), ref = dir / ("ref_" + key);
          require_ok(run(megatron_py() + " write " + type + " " + q(m.path) + " " + q(dir / "corpus.json") + " " + key +
                         " " + q(ref) + " --append-eod 2>&1"));
          require_same_file(ours + ".bin", ref + ".bin");
          require_same_file(ours + ".idx", ref + ".idx");
        }
        // Real values, read from the bytes: the dtype, one document per record, the eod.
        const std::string idx = read_all(dir / "out/corpus_text_document.idx");
        const std::string bin = read_all(dir / "out/corpus_text_document.bin");
        CHECK(std::string(idx.data(), 9) == std::string("MMIDIDX\0\0", 9));
        CHECK(at<uint64_t>(idx, 9) == 1);
        CHECK(static_cast<int>(at<uint8_t>(idx, 17)) == m.dtype_code);
        CHECK(at<uint64_t>(idx, 26) == kDocs + 1);
        const uint32_t size = m.dtype_code == 8 ? 2 : 4;
        const uint32_t first = m.dtype_code == 8 ? at<uint16_t>(bin, 0) : at<uint32_t>(bin, 0);
        const uint32_t last = m.dtype_code == 8 ? at<uint16_t>(bin, bin.size() - 2) : at<uint32_t>(bin, bin.size() - 4);
        CHECK(bin.size() % size == 0);
        if (type == "SentencePieceTokenizer") {
          CHECK(last == m.sentencepiece_eod);
          // loom-pack head shows the ids past the model's pieces, which the model cannot decode.
          const RunResult head = run(q(LOOM_PACK_BIN) + " head -n 1 --model " + q(m.path) + " " +
                                     q(dir / "out/corpus_text_document.bin") + " 2>/dev/null");
          CHECK(head.exit_code == 0);
          CHECK_THAT(head.output, Catch::EndsWith("[id " + std::to_string(m.sentencepiece_eod) + "]\n"));
        }
        else CHECK(last == 2);  // the model's eos
        if (type == "Llama2Tokenizer") CHECK(first == 1);  // the model's bos
        else CHECK(first != 1);
      }
    }
  }
  SECTION("without --append-eod, and documents of a whole txt file each") {
    const std::string m = q(corpus("spm_test_unigram_1k.model"));
    require_ok(tokenize("--input " + q(dir / "corpus.json") + " --output-prefix " + q(dir / "out/c") +
                        " --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model " + m + " --workers 1 2>&1"));
    require_ok(run(megatron_py() + " write GPTSentencePieceTokenizer " + m + " " + q(dir / "corpus.json") + " text " +
                   q(dir / "ref") + " 2>&1"));
    require_same_file(dir / "out/c_text_document.bin", dir / "ref.bin");
    require_same_file(dir / "out/c_text_document.idx", dir / "ref.idx");
    // --txt-doc file reads the text whole (the reader thread cuts documents, not the encoders) and
    // strips it, so the reference gets the stripped text.
    write_all(dir / "t.txt", "  Hello </s> and <s>there<EOD>\n\nSecond <CLS> paragraph.\n");
    require_ok(python_code(dir, "import json\nopen(r'''" + dir / "t.jsonl" + "''', 'w').write(json.dumps({'text': open(r'''" +
                                    dir / "t.txt" + "''').read().strip()}) + '\\n')\n"));
    require_ok(tokenize("--output-format megatron --tokenizer-type SentencePieceTokenizer --model " + m +
                        " --txt-doc file --append-eod --output-dir " + q(dir / "txt") + " " + q(dir / "t.txt") + " 2>&1"));
    require_ok(run(megatron_py() + " write SentencePieceTokenizer " + m + " " + q(dir / "t.jsonl") + " text " +
                   q(dir / "reft") + " --append-eod 2>&1"));
    require_same_file(dir / "txt/t.bin", dir / "reft.bin");
    require_same_file(dir / "txt/t.idx", dir / "reft.idx");
  }
}

TEST_CASE("several inputs, or a --partitions pattern, make one dataset per key, in input order",
          "[tokenize][e2e][megatron]") {
  TempDir dir("tok_megatron_inputs");
  run("mkdir -p " + q(dir / "parts"));
  write_all(dir / "parts/p1.jsonl", "{\"text\": \"The first part.\"}\n{\"text\": \"\"}\n");
  write_all(dir / "parts/p0.jsonl", "{\"text\": \"Zero <EOD> comes first.\"}\n");
  write_all(dir / "parts/p2.json", "{\"text\": \"A loose json file.\"}\n{\"text\": \"Last one\"}\n");
  // What Megatron's partitions of these files give with --keep-sequential-samples: the files in
  // order, their lines in order.
  run("cat " + q(dir / "parts/p0.jsonl") + " " + q(dir / "parts/p1.jsonl") + " " + q(dir / "parts/p2.json") + " > " +
      q(dir / "all.jsonl"));
  const std::string m = q(corpus("spm_test_unigram_1k.model"));
  require_ok(run(megatron_py() + " write SentencePieceTokenizer " + m + " " + q(dir / "all.jsonl") + " text " +
                 q(dir / "ref") + " --append-eod 2>&1"));
  const std::string args = " --tokenizer-type SentencePieceTokenizer --tokenizer-model " + m +
                           " --append-eod --workers 2 --partitions 2 --keep-sequential-samples 2>&1";
  // A pattern, as preprocess_data.py globs --input with --partitions (quoted: the shell leaves it).
  require_ok(tokenize("--input " + q(dir / "parts/p*") + " --output-prefix " + q(dir / "glob") + args));
  require_same_file(dir / "glob_text_document.bin", dir / "ref.bin");
  require_same_file(dir / "glob_text_document.idx", dir / "ref.idx");
  // Files one by one, and a folder: the same dataset.
  require_ok(tokenize("--input " + q(dir / "parts/p0.jsonl") + " " + q(dir / "parts/p1.jsonl") + " " +
                      q(dir / "parts/p2.json") + " --output-prefix " + q(dir / "files") + args));
  require_same_file(dir / "files_text_document.idx", dir / "ref.idx");
  require_ok(tokenize("--input " + q(dir / "parts") + " --output-prefix " + q(dir / "dir") + args));
  require_same_file(dir / "dir_text_document.bin", dir / "ref.bin");
  RunResult none = tokenize("--input " + q(dir / "parts/q*") + " --output-prefix " + q(dir / "none") + args);
  CHECK(none.exit_code == 1);
  CHECK_THAT(none.output, Catch::Contains("/parts/q*: the pattern matches no file"));
  // --resume keeps the dataset for the same inputs, and makes it again for others.
  RunResult again = tokenize("--input " + q(dir / "parts") + " --output-prefix " + q(dir / "dir") + " --resume" + args);
  require_ok(again);
  CHECK_THAT(again.output, Catch::Contains("(3 inputs) is complete, skipped (--resume)"));
  RunResult fewer = tokenize("--input " + q(dir / "parts/p0.jsonl") + " " + q(dir / "parts/p1.jsonl") +
                             " --output-prefix " + q(dir / "dir") + " --resume" + args);
  require_ok(fewer);
  CHECK_THAT(fewer.output, Catch::Contains("written with other settings"));
}

TEST_CASE("a Megatron dataset is skipped by --resume only when complete and made the same way",
          "[tokenize][e2e][megatron]") {
  TempDir dir("tok_megatron_resume");
  make_corpus(dir);
  const std::string cmd = "--input " + q(dir / "corpus.json") + " --output-prefix " + q(dir / "o") +
                          " --tokenizer-type Llama2Tokenizer --tokenizer-model " + q(corpus("spm_test_unigram_1k.model")) +
                          " --workers 2 --resume";
  require_ok(tokenize(cmd + " 2>&1"));
  const std::string idx = read_all(dir / "o_text_document.idx");
  RunResult again = tokenize(cmd + " 2>&1");
  require_ok(again);
  CHECK_THAT(again.output, Catch::Contains("is complete, skipped (--resume)"));
  RunResult other = tokenize(cmd + " --append-eod 2>&1");
  require_ok(other);
  CHECK_THAT(other.output, Catch::Contains("written with other settings"));
  CHECK(read_all(dir / "o_text_document.idx") != idx);
}

TEST_CASE("a model without bos and eos: SentencePieceTokenizer adds its own, the others refuse what needs them",
          "[tokenize][e2e][megatron]") {
  TempDir dir("tok_megatron_nobos");
  make_corpus(dir);
  // Trained here (from tests/data): unk 0, pad 1 ("<pad>", a piece SentencePieceTokenizer keeps), no
  // bos, no eos.
  require_ok(python_code(dir, "import sentencepiece as spm\n"
                              "spm.SentencePieceTrainer.train(input=r'''" + corpus("botchan.txt") + "''', model_prefix=r'''" +
                              dir / "nobos" + "''', vocab_size=300, unk_id=0, pad_id=1, bos_id=-1, eos_id=-1, "
                              "minloglevel=2)\n"));
  const std::string m = q(dir / "nobos.model"), in = " --input " + q(dir / "corpus.json");
  // <CLS> 300, <SEP> 301, <EOD> 302, <MASK> 303, <pad> 1 (the model's), <BOS> 304, <EOS> 305.
  require_ok(tokenize("--tokenizer-type SentencePieceTokenizer --tokenizer-model " + m + in + " --output-prefix " +
                      q(dir / "sp") + " --append-eod 2>&1"));
  require_ok(run(megatron_py() + " write SentencePieceTokenizer " + m + " " + q(dir / "corpus.json") + " text " +
                 q(dir / "ref") + " --append-eod 2>&1"));
  require_same_file(dir / "sp_text_document.bin", dir / "ref.bin");
  require_same_file(dir / "sp_text_document.idx", dir / "ref.idx");
  const std::string bin = read_all(dir / "sp_text_document.bin");
  CHECK(at<uint16_t>(bin, bin.size() - 2) == 302);
  // "<BOS><EOS><EOD><EOD>" is four special ids and its eod: 304 305 302 302 302.
  CHECK(bin.find(std::string("\x30\x01\x31\x01\x2e\x01\x2e\x01\x2e\x01", 10)) != std::string::npos);
  // Without eos, GPTSentencePieceTokenizer works without --append-eod only.
  require_ok(tokenize("--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model " + m + in + " --output-prefix " +
                      q(dir / "gpt") + " 2>&1"));
  require_ok(run(megatron_py() + " write GPTSentencePieceTokenizer " + m + " " + q(dir / "corpus.json") + " text " +
                 q(dir / "refg") + " 2>&1"));
  require_same_file(dir / "gpt_text_document.idx", dir / "refg.idx");
  RunResult eod = tokenize("--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model " + m + in +
                           " --output-prefix " + q(dir / "x") + " --append-eod 2>&1");
  CHECK(eod.exit_code == 1);
  CHECK_THAT(eod.output, Catch::Contains("nobos.model: the model has no EOS piece, so GPTSentencePieceTokenizer's eod "
                                         "is -1, which --append-eod would write as an id; drop --append-eod"));
  RunResult llama = tokenize("--tokenizer-type Llama2Tokenizer --tokenizer-model " + m + in + " --output-prefix " +
                             q(dir / "x") + " 2>&1");
  CHECK(llama.exit_code == 1);
  CHECK_THAT(llama.output, Catch::Contains("nobos.model: the model has no BOS piece; Llama2Tokenizer starts every "
                                           "document with the model's bos id, here -1"));
  CHECK(list_dir(dir.path()).find("x_text_document") == std::string::npos);  // refused before writing
}

TEST_CASE("Megatron command lines loom does not reproduce are refused with the reason", "[tokenize][e2e][megatron]") {
  TempDir dir("tok_megatron_refused");
  write_all(dir / "a.jsonl", "{\"text\": \"x\"}\n");
  write_all(dir / "b.jsonl", "{\"text\": \"y\"}\n");
  const std::string base = "--tokenizer-model " + q(corpus("spm_test_unigram_1k.model")) + " --input " + q(dir / "a.jsonl") +
                           " --output-prefix " + q(dir / "p") + " --workers 1 ";
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--tokenizer-type GPT2BPETokenizer",
       "--tokenizer-type GPT2BPETokenizer: a Megatron-LM tokenizer type that is not a SentencePiece model; loom encodes "
       "SentencePiece models only; loom reproduces GPTSentencePieceTokenizer, SentencePieceTokenizer and Llama2Tokenizer"},
      {"--tokenizer-type HuggingFaceTokenizer", "HuggingFaceTokenizer: a Megatron-LM tokenizer type that is not a SentencePiece"},
      {"--tokenizer-type SentencePiece", "--tokenizer-type SentencePiece: not a Megatron-LM tokenizer type loom knows"},
      {"--tokenizer-type Llama2Tokenizer --dataset-impl lazy", "--dataset-impl: 'lazy' is not one of mmap"},
      {"--tokenizer-type Llama2Tokenizer --split-sentences", "--split-sentences: loom does not split documents into sentences"},
      {"--tokenizer-type Llama2Tokenizer --format loom",
       "--tokenizer-type writes Megatron-LM's dataset; it does not go with --format loom"},
      {"--tokenizer-type GPTSentencePieceTokenizer --bos",
       "--bos/--no-bos: with --format megatron the tokenizer type decides"},
      {"--tokenizer-type GPTSentencePieceTokenizer --partitions 0", "--partitions"},
  };
  // GPT2BPETokenizer as Megatron's README spells it, with no SentencePiece model at all.
  RunResult gpt2 = tokenize("--input " + q(dir / "a.jsonl") + " --output-prefix " + q(dir / "p") +
                            " --vocab-file gpt2-vocab.json --tokenizer-type GPT2BPETokenizer --merge-file gpt2-merges.txt"
                            " --append-eod --workers 1 2>&1");
  CHECK(gpt2.exit_code == 2);
  CHECK_THAT(gpt2.output, Catch::Contains("--tokenizer-type GPT2BPETokenizer: a Megatron-LM tokenizer type that is not"));
  for (const Case& c : cases) {
    RunResult r = tokenize(base + c.args + " 2>&1");
    INFO(c.args << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(c.message));
    CHECK(list_dir(dir.path()) == "a.jsonl\nb.jsonl\n");
  }
}
