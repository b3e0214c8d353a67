#include "loom/tokenize/tokenize_job.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "loom/count_text.h"
#include "loom/error.h"
#include "loom/hash.h"
#include "loom/log.h"
#include "loom/megatron_format.h"
#include "loom/progress.h"
#include "loom/spm/sentencepiece_model.h"
#include "loom/sys.h"
#include "loom/tokenize/byte_source.h"

namespace loom::tokenize {

namespace {
std::string seconds3(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", s);
  return buf;
}

// The model, loaded once per process (file, encoder choice and contents) and never freed: freeing
// InternLM's model (loom's encoder, and libsentencepiece's processors where they are loaded) takes
// a good part of its load time, serially, at the end of every run; the process's exit returns it
// at once. Several --json-keys of one call share it. (Still reachable: leak checkers stay quiet.)
const SentencePieceModel& load_model(const std::string& path, EncoderChoice choice) {
  static std::mutex m;
  static auto* models = new std::vector<std::tuple<std::string, EncoderChoice, uint64_t, const SentencePieceModel*>>();
  std::lock_guard<std::mutex> lock(m);
  // A missing file or a folder: the constructor says what is wrong.
  const bool file = sys::exists(path) && !sys::is_directory(path);
  const uint64_t fingerprint = file ? xxh64_file(path) : 0;
  for (const auto& [p, c, f, model] : *models) {
    if (file && p == path && c == choice && f == fingerprint) return *model;
  }
  auto model = std::make_unique<SentencePieceModel>(path, choice);
  // Kept under the fingerprint of what was loaded (the file may have changed since it was hashed),
  // so each distinct model is loaded and kept once.
  models->emplace_back(path, choice, model->info(false, false).model_fingerprint, model.get());
  return *model.release();
}
}  // namespace

std::string output_bin_path(const std::string& output_dir, const std::string& input) {
  input_format_for(input);  // rejects unknown extensions
  const std::string name = sys::basename(strip_compression_ext(input));
  return output_dir + "/" + name.substr(0, name.rfind('.')) + ".bin";
}

std::string settings_text(const TokenizeOptions& opt, const std::string& input, const TokenizerInfo& info,
                          uint32_t encoder) {
  std::string s = str("loom-tokenize settings 1\nformat ", shard_format_name(opt.format),
                      opt.format == ShardFormat::kMegatron
                          ? str("\nmegatron_tokenizer ", megatron_tokenizer_type_name(opt.megatron_type))
                          : std::string(),
                      "\nmodel_fingerprint ",
                      hex64(info.model_fingerprint), "\nvocab_size ", info.vocab_size, "\nbos_id ", info.bos_id,
                      "\neos_id ", info.eos_id, "\nbos ", opt.pipeline.bos ? 1 : 0, "\neos ", opt.pipeline.eos ? 1 : 0,
                      "\nencoder ", encoder, "\ncut ", kCutRule, "\nmax_doc_bytes ", opt.pipeline.max_doc_bytes, "\n");
  if (input_format_for(input) == InputFormat::kTxt) {
    const TxtDoc d = opt.reader.txt_doc;
    return s + str("txt_doc ", d == TxtDoc::kLine ? "line" : d == TxtDoc::kParagraph ? "paragraph" : "file", "\n");
  }
  if (input_format_for(input) == InputFormat::kJson && opt.reader.json_lines) s += "json_lines 1\n";
  s += str("raw_records ", opt.reader.raw_records ? 1 : 0, "\n");
  return opt.reader.raw_records ? s : s + str("text_key ", opt.reader.text_key, "\n");
}

void check_outputs_spare_inputs(const TokenizeOptions& opt) {
  std::vector<std::string> inputs = opt.inputs, outputs;
  inputs.push_back(opt.model);
  for (const std::string& in : opt.inputs) {
    const std::string bin = opt.output_bin.empty() ? output_bin_path(opt.output_dir, in) : opt.output_bin;
    outputs.insert(outputs.end(), {bin, index_path_for(opt.format, bin)});
    if (opt.format != ShardFormat::kLoom) outputs.push_back(settings_record_path(bin));
  }
  sys::check_outputs_spare_inputs(inputs, outputs);
}

namespace {

// Everything about the inputs that can be checked before any work: names, collisions, existence.
// Returns each input's output .bin; adds up their sizes into total_bytes.
std::vector<std::string> check_inputs(const TokenizeOptions& opt, bool one_dataset, uint64_t& total_bytes) {
  std::map<std::string, std::string> out_of;
  std::vector<std::string> bins;
  for (const std::string& in : opt.inputs) {
    const std::string bin = opt.output_bin.empty() ? output_bin_path(opt.output_dir, in) : opt.output_bin;
    input_format_for(in);  // rejects unknown extensions
    auto [it, fresh] = out_of.emplace(bin, in);
    LOOM_CHECK(fresh || one_dataset, "inputs ", it->second, " and ", in, " would both write ", bin,
               "; rename one or tokenize them into different --output-dir");
    LOOM_CHECK(sys::exists(in) && !sys::is_directory(in), in, ": no such input file");
    bins.push_back(bin);
    total_bytes += sys::file_size(in);
  }
  check_outputs_spare_inputs(opt);
  return bins;
}

// The ids the shards record, and the pipeline's document rules: the model's, or in Megatron's format
// those of the tokenizer type (its vocab_size, bos and eod stand in the model's place). Logged.
TokenizerInfo resolve_tokenizer(const TokenizeOptions& opt, const SentencePieceModel& encoder, double load_s,
                                PipelineOptions& pipeline) {
  TokenizerInfo info;
  if (opt.format == ShardFormat::kMegatron) {
    const MegatronTokenizer mt = make_megatron_tokenizer(opt.megatron_type, encoder, pipeline.eos);
    apply_megatron_rules(mt, pipeline.eos, pipeline);
    info = encoder.info(false, false);
    info.vocab_size = static_cast<uint32_t>(mt.vocab_size);
    info.bos_id = static_cast<int32_t>(mt.bos_id);
    info.eos_id = static_cast<int32_t>(mt.eod_id);
    log::info("model ", opt.model, " as Megatron-LM's ", megatron_tokenizer_type_name(mt.type), ": vocab_size ",
              mt.vocab_size, " (", megatron_dtype_name(megatron_dtype_for_vocab(mt.vocab_size)), " ids), bos ",
              mt.bos_id >= 0 ? str("id ", mt.bos_id, " before every document") : std::string("none"), ", eod ",
              mt.eod_id, pipeline.eos ? " after every document with ids (--append-eod)" : " not appended",
              mt.specials.empty() ? std::string() : str(", ", counted(mt.specials.size(), "special piece"),
                                                         " taken out of the text"));
  } else {
    info = encoder.info(pipeline.bos, pipeline.eos);
  }
  log::info("model ", opt.model, ": vocab ", encoder.vocab_size(), ", bos ", encoder.bos_id(), ", eos ",
            encoder.eos_id(), ", fingerprint ", hex64(info.model_fingerprint), ", loaded in ", seconds3(load_s), " s");
  log::info("encoder: ", encoder.encoder_name(),
            encoder.why_not_loom().empty() ? std::string() : str(" (loom's encoder cannot: ", encoder.why_not_loom(), ")"));
  return info;
}

// What one input gave: a line for everyone, and where its threads' time went at --verbose.
void log_input(const std::string& in, const std::string& bin, const FileStats& st, unsigned threads) {
  log::info(in, " -> ", bin, ": ", counted(st.docs, "doc"), ", ", counted(st.tokens, "token"),
            st.bad ? str(", ", counted(st.bad, "bad record"), " skipped") : std::string(),
            st.empty ? str(", ", counted(st.empty, "empty text"), " skipped") : std::string());
  log::debug(in, ": CPU seconds of the threads: reading ", seconds3(st.read_cpu_s), ", writing ", seconds3(st.write_cpu_s),
             ", encoding ", seconds3(st.encode_cpu_s), " (", counted(threads, "thread"), ")");
  log::debug(in, ": ", seconds3(st.wall_s), " s in the pipeline: first batch encoded at ", seconds3(st.first_block_s),
             " s, the last at ", seconds3(st.last_block_s), " s; the encoder threads had nothing to encode for ",
             seconds3(st.encode_wait_s), " s in all (", seconds3(st.encode_wait_s / threads),
             " s each), the writer waited ", seconds3(st.write_wait_s), " s");
}

void add_to_summary(const FileStats& st, TokenizeSummary& sum) {
  sum.docs += st.docs;
  sum.tokens += st.tokens;
  sum.text_bytes += st.text_bytes;
  sum.bad += st.bad;
  sum.empty += st.empty;
}

// The one shard every input goes into (a Megatron dataset, as preprocess_data.py merges its
// partitions), or none when --resume finds it complete. Its settings are those of each input, in
// order, so --resume keeps it only for the same inputs made the same way.
std::unique_ptr<ShardSink> open_one_dataset(const TokenizeOptions& opt, const TokenizerInfo& info, uint32_t encoder) {
  std::string settings;
  for (const std::string& in : opt.inputs) settings += str("input ", in, "\n", settings_text(opt, in, info, encoder));
  const uint64_t settings_xxh64 = xxh64(settings.data(), settings.size());
  std::string why_not;
  if (opt.resume && shard_complete(opt.format, opt.output_bin, info, settings_xxh64, why_not)) {
    log::info(opt.output_bin, " (", counted(opt.inputs.size(), "input"), ") is complete, skipped (--resume)");
    return nullptr;
  }
  if (opt.resume) log::info(opt.output_bin, ": tokenizing (", why_not, ")");
  return make_shard_sink(opt.format, opt.output_bin, info, encoder, settings_xxh64);
}

// The parts of a run that every input shares.
struct Run {
  const TokenizeOptions& opt;
  const SentencePieceModel& encoder;
  const TokenizerInfo& info;
  const PipelineOptions& pipeline;
  WorkerPool& pool;
  Progress& progress;
  ShardSink* shared;  // the one dataset of every input, or null: a shard per input
};

// One input into its own shard (or the shared one). False when --resume finds its shard complete.
bool tokenize_input(const Run& run, const std::string& in, const std::string& bin, uint64_t bytes_before,
                    TokenizeSummary& sum) {
  const TokenizeOptions& opt = run.opt;
  const std::string settings = settings_text(opt, in, run.info, run.encoder.encoder());
  const uint64_t settings_xxh64 = xxh64(settings.data(), settings.size());
  std::string why_not;
  if (!run.shared && opt.resume && shard_complete(opt.format, bin, run.info, settings_xxh64, why_not)) {
    log::info(in, ": ", bin, " is complete, skipped (--resume)");
    return false;
  }
  if (!run.shared && opt.resume) log::info(in, ": tokenizing (", why_not, ")");
  auto reader = make_document_reader(in, opt.reader);
  std::unique_ptr<ShardSink> own;
  if (!run.shared) own = make_shard_sink(opt.format, bin, run.info, run.encoder.encoder(), settings_xxh64);
  ShardSink* sink = run.shared ? run.shared : own.get();
  const FileStats st = tokenize_documents(*reader, run.encoder, *sink, run.pipeline, [&](uint64_t bytes, uint64_t tokens) {
    run.progress.set(bytes_before + bytes);
    run.progress.set_extra("tokens", sum.tokens + tokens);
  }, &run.pool);
  for (const std::string& e : st.bad_examples) log::warn("skipped ", e);
  if (st.bad > st.bad_examples.size())
    log::warn("... and ", counted(st.bad - st.bad_examples.size(), "more bad record", "more bad records"), " in ", in);
  LOOM_CHECK(st.docs > 0 || run.shared, in, ": no documents to write (", st.bad, " bad, ", st.empty,
             " empty); an empty shard is not written");
  if (own) own->commit(), ++sum.files;
  log_input(in, bin, st, run.pipeline.threads);
  add_to_summary(st, sum);
  return true;
}

}  // namespace

TokenizeSummary run_tokenize(const TokenizeOptions& opt) {
  LOOM_CHECK(!opt.inputs.empty(), "no INPUT files given");
  // Several inputs into one output: a Megatron dataset, as preprocess_data.py merges its partitions.
  const bool one_dataset = !opt.output_bin.empty() && opt.inputs.size() > 1;
  LOOM_CHECK(!one_dataset || opt.format == ShardFormat::kMegatron, "one output file (", opt.output_bin, ") for ",
             opt.inputs.size(), " inputs: give one input, or an output folder");
  uint64_t total_bytes = 0;
  const std::vector<std::string> bins = check_inputs(opt, one_dataset, total_bytes);
  const auto load0 = std::chrono::steady_clock::now();
  const SentencePieceModel& encoder = load_model(opt.model, opt.encoder);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load0).count();
  PipelineOptions pipeline = opt.pipeline;
  const TokenizerInfo info = resolve_tokenizer(opt, encoder, load_s, pipeline);
  sys::make_dirs(opt.output_bin.empty() ? opt.output_dir : sys::dirname(opt.output_bin));

  TokenizeSummary sum;
  sum.input_bytes = total_bytes;
  WorkerPool pool(opt.pipeline.threads);  // one set of encoder threads (and chunk caches) for every input
  Progress progress("tokenize", total_bytes, "B", 30.0);
  std::unique_ptr<ShardSink> shared;
  if (one_dataset && !(shared = open_one_dataset(opt, info, encoder.encoder()))) {
    sum.files_resumed = 1;
    progress.finish();
    return sum;
  }
  const Run run{opt, encoder, info, pipeline, pool, progress, shared.get()};
  uint64_t bytes_before = 0;
  for (size_t i = 0; i < opt.inputs.size(); ++i) {
    const uint64_t size = sys::file_size(opt.inputs[i]);
    if (!tokenize_input(run, opt.inputs[i], bins[i], bytes_before, sum)) ++sum.files_resumed;
    bytes_before += size;
    progress.set(bytes_before);
  }
  if (shared) {
    LOOM_CHECK(shared->num_docs() > 0, opt.output_bin, ": no documents in ", opt.inputs.size(),
               " inputs; an empty dataset is not written");
    shared->commit();
    ++sum.files;
  }
  progress.finish();
  sum.seconds = progress.elapsed_s();
  return sum;
}

}  // namespace loom::tokenize
