// `loom-tokenize`: every INPUT (NAME.EXT[.gz|.zst]) into DIR/NAME.bin + DIR/NAME.bin.meta, one input
// after another, each through the parallel pipeline. Options are a typed struct, validated once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/spm/sentencepiece_model.h"
#include "loom/tokenize/document_reader.h"
#include "loom/tokenize/megatron_tokenizer.h"
#include "loom/tokenize/pipeline.h"
#include "loom/tokenize/shard_sink.h"

namespace loom::tokenize {

struct TokenizeOptions {
  std::string model;
  std::string output_dir;
  // When set: the one input is written to this .bin path (InternLM's --bin_output_path); with
  // format kMegatron every input, in order, into this one dataset (Megatron's --output-prefix).
  std::string output_bin;
  std::vector<std::string> inputs;
  ReaderOptions reader;
  PipelineOptions pipeline;  // bos/eos resolved here
  ShardFormat format = ShardFormat::kLoom;
  // With format kMegatron: the ids and eod as this Megatron-LM tokenizer type gives them
  // (megatron_tokenizer.h); pipeline.eos is --append-eod, and the type decides bos.
  MegatronTokenizerType megatron_type = MegatronTokenizerType::kGptSentencePiece;
  EncoderChoice encoder = EncoderChoice::kAuto;  // the ids are the same; loom's is faster
  bool resume = false;
};

struct TokenizeSummary {
  uint64_t files = 0, files_resumed = 0;
  uint64_t docs = 0, tokens = 0, text_bytes = 0, input_bytes = 0;
  uint64_t bad = 0, empty = 0;
  double seconds = 0;
};

// The canonical text of every setting that changes the shard written for one input, one
// "key value" line each: format (and for megatron the tokenizer type), model fingerprint, vocab,
// bos/eos ids and flags (for megatron the type's vocab_size, bos and eod), encoder, the
// cut rule and --max-doc-bytes, and the reader options that apply to this input's kind (--txt-doc
// for txt; --raw-records and --text-key for json/jsonl). Its XXH64 is the shard's settings_xxh64.
// Not in it: --threads, --batch-bytes (the output is the same) and --on-error (a shard that exists
// was written without a bad record stopping it).
std::string settings_text(const TokenizeOptions& options, const std::string& input, const TokenizerInfo& info,
                          uint32_t encoder);

// "DIR/NAME.bin" for an input; throws for an unknown extension.
std::string output_bin_path(const std::string& output_dir, const std::string& input);
// Refuses a run whose outputs (each input's .bin, .meta or .idx, and the .loom-settings) include one
// of its inputs or the model (sys::check_outputs_spare_inputs). run_tokenize checks its own; the CLI
// checks every --json-keys job before the first writes.
void check_outputs_spare_inputs(const TokenizeOptions& options);
TokenizeSummary run_tokenize(const TokenizeOptions& options);

}  // namespace loom::tokenize
