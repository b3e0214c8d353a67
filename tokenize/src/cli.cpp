#include "loom/tokenize/cli.h"

#include <thread>
#include <utility>

#include "loom/count_text.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/options.h"
#include "loom/progress.h"
#include "loom/sys.h"
#include "loom/tokenize/megatron_tokenizer.h"
#include "loom/tokenize/tokenize_job.h"
#include "loom/tokenize/train_spm.h"

namespace loom::tokenize {

namespace {

std::string default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return std::to_string(n == 0 ? 1 : n);
}

// Ranges of the numeric options, checked before any work. Threads: far above any host's cores, low
// enough that a typo is not thousands of threads. Byte sizes: a document piece and a batch are held
// in memory (4 batches per thread in flight) and SentencePiece indexes text with int.
constexpr uint64_t kMaxThreads = 1024;
constexpr uint64_t kMaxTextBytes = (uint64_t{1} << 31) - 1;

template <typename T>
T one_of(const std::string& option, const std::string& value, std::initializer_list<std::pair<const char*, T>> choices) {
  std::string names;
  for (const auto& [name, v] : choices) {
    if (value == name) return v;
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  throw UsageError(str("--", option, ": '", value, "' is not one of ", names));
}

void check_text_key(const std::string& key) {
  if (key.empty() || key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos)
    throw UsageError(str("--text-key: '", key, "' is not a dotted key path like text or meta.body"));
}

int report(const TokenizeSummary& s);

// Options that choose and read documents, shared by both subcommands.
void add_input_options(po::options_description& d) {
  d.add_options()
      ("input", po::value<std::vector<std::string>>()->multitoken(), "input files (positional): NAME.txt|json|jsonl[.gz|.zst], "
       "or folders, walked recursively for such files")
      ("txt-doc", po::value<std::string>()->default_value("line"),
       "txt documents: line (each non-empty stripped line), paragraph (blank-line separated), file")
      ("text-key", po::value<std::string>()->default_value("text"), "json/jsonl: dotted path of the text string")
      ("raw-records", po::bool_switch(), "json/jsonl: encode the whole record as InternLM's tools/tokenizer.py does")
      ("on-error", po::value<std::string>()->default_value("fail"),
       "bad record (malformed JSON, missing/non-string key, invalid UTF-8): fail or skip");
}

void read_input_options(const OptionParser& p, ReaderOptions& r, OnError& on_error, std::vector<std::string>& inputs) {
  r.txt_doc = one_of<TxtDoc>("txt-doc", p.get<std::string>("txt-doc"),
                             {{"line", TxtDoc::kLine}, {"paragraph", TxtDoc::kParagraph}, {"file", TxtDoc::kFile}});
  r.text_key = p.get<std::string>("text-key");
  check_text_key(r.text_key);
  r.raw_records = p.get<bool>("raw-records");
  on_error = one_of<OnError>("on-error", p.get<std::string>("on-error"), {{"fail", OnError::kFail}, {"skip", OnError::kSkip}});
  if (p.vm().count("input")) inputs = expand_inputs(p.get<std::vector<std::string>>("input"));
  if (inputs.empty()) throw UsageError("no INPUT files given (see --help)");
}

// --bos/--no-bos (and eos): both switches exist so a config file can say either; giving both is an error.
bool on_off(const OptionParser& p, const std::string& name, bool fallback) {
  const bool on = p.get<bool>(name), off = p.get<bool>("no-" + name);
  if (on && off) throw UsageError(str("--", name, " and --no-", name, " contradict each other"));
  return on ? true : off ? false : fallback;
}

// What --format megatron changes of the options: Megatron's rules for bos/eos, its reading of
// inputs (loose json, --input patterns), its --partitions.
void read_megatron_options(const OptionParser& p, uint64_t partitions, TokenizeOptions& opt) {
  // The tokenizer type decides bos (Llama2Tokenizer's); --eos is --append-eod, off by default as in Megatron.
  if (p.get<bool>("bos") || p.get<bool>("no-bos"))
    throw UsageError("--bos/--no-bos: with --format megatron the tokenizer type decides (Llama2Tokenizer starts "
                     "documents with bos, the others do not)");
  opt.pipeline.bos = false;
  opt.pipeline.eos = on_off(p, "eos", false);
  if (opt.reader.raw_records) throw UsageError("--raw-records does not go with --format megatron (Megatron encodes a json key)");
  // preprocess_data.py reads its input a line at a time: a .json file is JSON lines ("loose json").
  opt.reader.json_lines = true;
  // With --partitions it takes --input as a pattern (Python's glob); loom expands one that names
  // no file, sorted, and writes the matches in that order into one dataset per key.
  std::vector<std::string> expanded;
  for (const std::string& in : opt.inputs) {
    if (sys::exists(in) || in.find_first_of("*?[") == std::string::npos) {
      expanded.push_back(in);
      continue;
    }
    const std::vector<std::string> matches = sys::glob(in);
    LOOM_CHECK(!matches.empty(), "--input ", in, ": the pattern matches no file");
    expanded.insert(expanded.end(), matches.begin(), matches.end());
  }
  opt.inputs = expand_inputs(expanded);
  if (partitions > 1 && !p.get<bool>("keep-sequential-samples"))
    log::info("--partitions ", partitions, ": loom writes the documents in input order, as Megatron-LM does with ",
              "--keep-sequential-samples (without it Megatron interleaves them over its partitions)");
}

}  // namespace

namespace {

// loom-tokenize's options, with Megatron-LM's tools/preprocess_data.py and InternLM's
// tools/tokenizer.py spellings.
void declare_tokenize_options(OptionParser& p) {
  add_input_options(p.options());
  p.options().add_options()
      ("model", po::value<std::string>(), "SentencePiece model (required)")
      ("output-dir", po::value<std::string>(), "folder for NAME.bin + NAME.bin.meta (required, or one of the two below)")
      ("output-prefix", po::value<std::string>(), "Megatron's spelling: the shards of json key K go to the folder "
       "PREFIX_K_document/ (--output-dir PREFIX_K_document --text-key K)")
      ("json-keys", po::value<std::vector<std::string>>()->multitoken(), "Megatron's: json keys, one shard set "
       "(folder) per key, with --output-prefix; one key alone is --text-key")
      ("bin_output_path", po::value<std::string>(), "InternLM tools/tokenizer.py's: the one input is written to "
       "this .bin (+ .meta); implies --format internlm and, for json/jsonl, --raw-records, unless given")
      ("format", po::value<std::string>()->default_value("loom"), "loom (docs/FORMAT.md), internlm (tools/tokenizer.py) "
       "or megatron (Megatron-LM's indexed dataset, NAME.bin + NAME.idx; the default with --tokenizer-type)")
      ("tokenizer-type", po::value<std::string>(), "Megatron-LM's: GPTSentencePieceTokenizer, SentencePieceTokenizer or "
       "Llama2Tokenizer, reproduced id for id (docs/TOKENIZE.md); implies --format megatron unless given")
      ("dataset-impl", po::value<std::string>(), "Megatron-LM's: mmap, the indexed dataset it reads today (the only one)")
      ("partitions", po::value<std::string>()->default_value("1"), "Megatron-LM's: accepted; loom writes one dataset "
       "per key in input order whatever the count (Megatron's partitions interleave lines when N > 1)")
      ("keep-sequential-samples", po::bool_switch(), "Megatron-LM's: accepted; loom always keeps the input order "
       "(what this flag asks of Megatron's --partitions)")
      ("log-interval", po::value<std::string>()->default_value("1000"), "Megatron-LM's: accepted; loom's progress "
       "line reports every 30 s")
      ("keep-newlines", po::bool_switch(), "Megatron-LM's: accepted; it only changes --split-sentences, which loom "
       "does not do (the text is encoded with its newlines as it is)")
      ("split-sentences", po::bool_switch(), "Megatron-LM's: refused (NLTK's punkt splitter is not reproduced)")
      ("vocab-file", po::value<std::string>(), "Megatron-LM's: accepted and unused (its SentencePiece types read "
       "--tokenizer-model), so that the types loom refuses are refused with their reason")
      ("merge-file", po::value<std::string>(), "Megatron-LM's: as --vocab-file")
      ("bos", po::bool_switch(), "start each document with the model's BOS id (default)")
      ("no-bos", po::bool_switch(), "no BOS id")
      ("eos", po::bool_switch(), "end each document with the model's EOS id (default with --format loom)")
      ("no-eos", po::bool_switch(), "no EOS id (default with --format internlm, as tools/tokenizer.py)")
      ("threads", po::value<std::string>()->default_value(default_threads()), "encoder threads, 1 to 1024 (default: all cores)")
      ("max-doc-bytes", po::value<std::string>()->default_value(std::to_string(1 << 20)),
       "documents longer than this are cut on whitespace into pieces of at most this many bytes, encoded "
       "separately and concatenated (bos/eos only around the whole document); 64 to 2^31-1")
      ("batch-bytes", po::value<std::string>()->default_value(std::to_string(64 << 10)),
       "bytes of text per encoder work item, 1 to 2^31-1")
      ("resume", po::bool_switch(), "skip inputs whose complete shards already exist in --output-dir")
      ("encoder", po::value<std::string>()->default_value("auto"),
       "auto (loom's own where it encodes the model, else libsentencepiece), loom or sentencepiece; "
       "the ids are the same")
      ("verbose", po::bool_switch(), "also log where each input's time went: the CPU seconds of the reading, "
       "writing and encoding threads and the pipeline's waits");
  p.positional("input");
  // --input and --text_input_path are the positional INPUT; '-' = '_' makes --text-input-path one too.
  p.alias("text_input_path", "input");
  p.alias("tokenizer-model", "model");
  p.alias("workers", "threads");
  p.alias("append-eod", "eos");
  p.alias("output-format", "format");
}

// Where the shards go: --output-dir, --bin_output_path (InternLM's) or --output-prefix with
// --json-keys (Megatron's), exactly one of the three (tokenize_main checks). Returns the json keys, one job each (none: one job of --text-key).
std::vector<std::string> read_outputs(const OptionParser& p, TokenizeOptions& opt) {
  if (p.vm().count("output-dir")) opt.output_dir = p.get<std::string>("output-dir");
  if (p.vm().count("bin_output_path")) {
    opt.output_bin = p.get<std::string>("bin_output_path");
    if (opt.inputs.size() != 1)
      throw UsageError(str("--bin_output_path names one output file; ", opt.inputs.size(), " inputs given"));
    if (!p.has("text-key")) opt.reader.raw_records = true;  // tools/tokenizer.py encodes the whole record
  }
  std::vector<std::string> keys;
  if (p.vm().count("json-keys")) {
    keys = p.get<std::vector<std::string>>("json-keys");
    if (keys.empty()) throw UsageError("--json-keys: give at least one key");
    if (p.has("text-key")) throw UsageError("give --json-keys or --text-key, not both");
    if (keys.size() > 1 && !p.vm().count("output-prefix"))
      throw UsageError("--json-keys with several keys writes one shard set per key: give --output-prefix");
  }
  if (p.vm().count("output-prefix") && keys.empty()) keys.push_back(opt.reader.text_key);
  return keys;
}

// The output format and its document rules (bos/eos), with Megatron-LM's flags: its spelling
// (--tokenizer-type, which every preprocess_data.py line has, or --dataset-impl) writes its dataset
// unless --format says otherwise; InternLM's --bin_output_path writes InternLM's.
void read_format(const OptionParser& p, TokenizeOptions& opt) {
  const bool megatron_cli = p.has("tokenizer-type") || p.has("dataset-impl");
  const std::string format = p.has("format")                  ? p.get<std::string>("format")
                             : p.vm().count("bin_output_path") ? "internlm"
                             : megatron_cli                    ? "megatron"
                                                               : "loom";
  opt.format = one_of<ShardFormat>("format", format, {{"loom", ShardFormat::kLoom}, {"internlm", ShardFormat::kInternlm},
                                                      {"megatron", ShardFormat::kMegatron}});
  if (p.has("dataset-impl")) one_of<int>("dataset-impl", p.get<std::string>("dataset-impl"), {{"mmap", 0}});
  if (p.get<bool>("split-sentences"))
    throw UsageError("--split-sentences: loom does not split documents into sentences (Megatron-LM does it with "
                     "NLTK's punkt models); without it each text is one sequence, as preprocess_data.py writes it");
  const uint64_t partitions = p.get_uint("partitions", 1, kMaxThreads);
  static_cast<void>(p.get_uint("log-interval", 1, UINT64_MAX));  // checked, then not used
  if (p.has("tokenizer-type")) {
    opt.megatron_type = parse_megatron_tokenizer_type(p.get<std::string>("tokenizer-type"));
    if (opt.format != ShardFormat::kMegatron)
      throw UsageError(str("--tokenizer-type writes Megatron-LM's dataset; it does not go with --format ", format));
  }
  if (opt.format == ShardFormat::kMegatron) {
    read_megatron_options(p, partitions, opt);
  } else {
    opt.pipeline.bos = on_off(p, "bos", true);
    opt.pipeline.eos = on_off(p, "eos", opt.format == ShardFormat::kLoom);
  }
}

// What differs from the defaults, and what every document gets. In Megatron's format the tokenizer
// type decides bos (Llama2Tokenizer's; the pipeline gets it from apply_megatron_rules).
void log_configuration(const OptionParser& p, const TokenizeOptions& opt) {
  const bool megatron = opt.format == ShardFormat::kMegatron;
  const bool bos = megatron ? opt.megatron_type == MegatronTokenizerType::kLlama2 : opt.pipeline.bos;
  const std::string changed = p.changed_ini();
  log::info("loom-tokenize configuration (what differs from the defaults):\n", changed.empty() ? "(all defaults)\n" : changed,
            "documents get: BOS ", bos ? "yes" : "no", megatron ? str(" (", megatron_tokenizer_type_name(opt.megatron_type), ")") : "",
            ", EOS ", opt.pipeline.eos ? "yes" : "no", "; ", counted(opt.inputs.size(), "input"));
}

// --json-keys K1 K2 ...: one job per key, each its own shard set, every job's outputs checked
// before the first one writes.
int run_json_key_jobs(const OptionParser& p, const TokenizeOptions& opt, const std::vector<std::string>& keys) {
  std::vector<TokenizeOptions> jobs;
  for (const std::string& key : keys) {
    TokenizeOptions job = opt;
    job.reader.text_key = key;
    check_text_key(key);
    if (p.vm().count("output-prefix")) {
      // Megatron's PREFIX_{key}_document.bin/.idx is one dataset; loom's format gets a folder of that name.
      const std::string name = p.get<std::string>("output-prefix") + "_" + key + "_document";
      if (opt.format == ShardFormat::kMegatron) {
        job.output_bin = name + ".bin";  // every input, in order (--output-dir: one dataset per input)
      } else {
        job.output_dir = name;
      }
    }
    check_outputs_spare_inputs(job);
    jobs.push_back(std::move(job));
  }
  for (const TokenizeOptions& job : jobs) {
    log::info("json key ", job.reader.text_key, " -> ", job.output_bin.empty() ? job.output_dir : job.output_bin);
    report(run_tokenize(job));
  }
  return kExitOk;
}

}  // namespace

int tokenize_main(const std::vector<std::string>& args) {
  OptionParser p("loom-tokenize", "loom-tokenize --model M.model --output-dir DIR [options] INPUT...\n"
                                  "       loom-tokenize train-spm --vocab-size N --model-prefix P [options] INPUT...\n"
                                  "       loom-tokenize --version");
  declare_tokenize_options(p);
  if (!p.parse(args)) return kExitOk;  // --help
  if (p.get<bool>("verbose")) log::set_level(log::Level::kDebug);
  // First, so that a type loom does not reproduce is refused for what it is, not for a missing model.
  if (p.has("tokenizer-type")) parse_megatron_tokenizer_type(p.get<std::string>("tokenizer-type"));
  if (!p.vm().count("model")) throw UsageError("--model is required (see --help)");
  const auto outputs = p.vm().count("output-dir") + p.vm().count("output-prefix") + p.vm().count("bin_output_path");
  if (outputs == 0) throw UsageError("--output-dir is required (see --help)");
  if (outputs > 1) throw UsageError("give one of --output-dir, --output-prefix and --bin_output_path");

  TokenizeOptions opt;
  read_input_options(p, opt.reader, opt.pipeline.on_error, opt.inputs);
  opt.model = p.get<std::string>("model");
  const std::vector<std::string> keys = read_outputs(p, opt);
  read_format(p, opt);
  opt.pipeline.threads = static_cast<unsigned>(p.get_uint("threads", 1, kMaxThreads));
  opt.pipeline.max_doc_bytes = p.get_uint("max-doc-bytes", 64, kMaxTextBytes);
  opt.pipeline.batch_bytes = p.get_uint("batch-bytes", 1, kMaxTextBytes);
  opt.resume = p.get<bool>("resume");
  opt.encoder = one_of<EncoderChoice>("encoder", p.get<std::string>("encoder"),
                                      {{"auto", EncoderChoice::kAuto}, {"loom", EncoderChoice::kLoom},
                                       {"sentencepiece", EncoderChoice::kSentencePiece}});
  log_configuration(p, opt);
  if (keys.empty()) return report(run_tokenize(opt));
  return run_json_key_jobs(p, opt, keys);
}

namespace {
int report(const TokenizeSummary& s) {
  const double secs = s.seconds > 0 ? s.seconds : 1e-9;
  // The rates are the progress line's: input bytes and tokens over the same clock.
  log::info("summary: ", counted(s.files, "file"), " written",
            s.files_resumed ? str(", ", format_count(s.files_resumed), " skipped (--resume)") : "",
            ", ", counted(s.docs, "doc"), ", ", counted(s.tokens, "token"), ", ",
            format_bytes(static_cast<double>(s.text_bytes)), " of text (", format_bytes(static_cast<double>(s.input_bytes)),
            " of input) in ", format_duration(s.seconds), ": ", format_bytes(static_cast<double>(s.input_bytes) / secs),
            "/s of input, ", format_number(static_cast<double>(s.tokens) / secs, 3), " tokens/s; skipped ",
            counted(s.bad, "bad record"), ", ", counted(s.empty, "empty text"));
  return kExitOk;
}
}  // namespace

int train_spm_main(const std::vector<std::string>& args) {
  OptionParser p("loom-tokenize train-spm", "loom-tokenize train-spm --vocab-size N --model-prefix P [options] INPUT...");
  TrainSpmOptions opt;
  add_input_options(p.options());
  p.options().add_options()
      ("vocab-size", po::value<std::string>(), "vocabulary size, 1 to 2^31-1 (required)")
      ("model-prefix", po::value<std::string>(), "writes PREFIX.model (required)")
      ("model-type", po::value<std::string>()->default_value("unigram"), "unigram, bpe, char or word")
      ("character-coverage", po::value<std::string>()->default_value("0.9995"),
       "share of characters the model covers, in (0, 1]; the rest become bytes (with --byte-fallback)")
      ("normalization", po::value<std::string>()->default_value("nmt_nfkc"),
       "SentencePiece normalization rule: nmt_nfkc, nfkc, nmt_nfkc_cf, nfkc_cf or identity")
      ("byte-fallback", value_with_default(&opt.byte_fallback, true), "unknown characters become UTF-8 byte pieces")
      ("max-sentence-length", po::value<std::string>()->default_value(std::to_string(1 << 16)),
       "documents longer than this many bytes are cut on whitespace before training; 64 to 2^31-1")
      ("input-sentence-size", po::value<std::string>()->default_value("0"), "sample this many pieces (0: all)")
      ("threads", po::value<std::string>()->default_value(default_threads()), "trainer threads, 1 to 1024");
  p.positional("input");
  if (!p.parse(args)) return kExitOk;  // --help
  if (!p.vm().count("vocab-size")) throw UsageError("--vocab-size is required (see --help)");
  if (!p.vm().count("model-prefix")) throw UsageError("--model-prefix is required (see --help)");
  read_input_options(p, opt.reader, opt.on_error, opt.inputs);
  opt.vocab_size = static_cast<uint32_t>(p.get_uint("vocab-size", 1, kMaxTextBytes));
  opt.model_prefix = p.get<std::string>("model-prefix");
  opt.model_type = p.get<std::string>("model-type");
  one_of<int>("model-type", opt.model_type, {{"unigram", 0}, {"bpe", 0}, {"char", 0}, {"word", 0}});
  opt.character_coverage = p.get_double("character-coverage", 0.0, 1.0);
  if (opt.character_coverage == 0.0) throw UsageError("--character-coverage: '0' covers no character; give a share in (0, 1]");
  opt.normalization = p.get<std::string>("normalization");
  one_of<int>("normalization", opt.normalization,
              {{"nmt_nfkc", 0}, {"nfkc", 0}, {"nmt_nfkc_cf", 0}, {"nfkc_cf", 0}, {"identity", 0}});
  opt.max_sentence_length = static_cast<uint32_t>(p.get_uint("max-sentence-length", 64, kMaxTextBytes));
  opt.input_sentence_size = p.get_uint("input-sentence-size", 0, static_cast<uint64_t>(INT64_MAX));
  opt.threads = static_cast<unsigned>(p.get_uint("threads", 1, kMaxThreads));
  const std::string changed = p.changed_ini();
  log::info("loom-tokenize train-spm configuration (what differs from the defaults):\n",
            changed.empty() ? "(all defaults)\n" : changed, counted(opt.inputs.size(), "input"));
  const TrainSpmSummary s = run_train_spm(opt);
  log::info("summary: trained ", s.model_path, " (vocab ", opt.vocab_size, ") from ", counted(s.docs, "doc"), ", ",
            format_bytes(static_cast<double>(s.bytes)), "; skipped ", counted(s.bad, "bad record"));
  return kExitOk;
}

}  // namespace loom::tokenize
