// loom weights -> a Hugging Face model folder that transformers loads as a LLaMA-family model
// (the mapping is hf_mapping.h; the layout is docs/HF.md):
//
//   OUT/config.json                       architecture, shape, rotary, dtype, special token ids
//   OUT/generation_config.json            bos/eos ids
//   OUT/model.safetensors                 all weights, when they fit in max_shard_bytes; else
//   OUT/model-0000k-of-0000N.safetensors  + OUT/model.safetensors.index.json (total_size, weight_map)
//   OUT/tokenizer.model                   the SentencePiece model, byte for byte
//   OUT/tokenizer_config.json, OUT/special_tokens_map.json   for LlamaTokenizer
//
// Every file goes through sys::AtomicFile; config.json is removed first and written last, so a
// killed export never leaves a folder that loads; model*.safetensors files of an earlier export
// that this one did not write are removed, so a rerun leaves exactly what a first run does.
// The command (run_export_hf) first refuses an output inside a checkpoint folder, and a folder that
// holds files unless --force (check_export_output).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hf_mapping.h"
#include "model.h"

namespace loom::hf {

struct ExportOptions {
  std::string output_dir;
  std::string tokenizer;                    // SentencePiece .model; "" writes no tokenizer files
  uint64_t max_shard_bytes = 5ull << 30;    // one safetensors file up to this many tensor bytes
  std::string dtype = "keep";               // keep | float32 | bfloat16 | float16
  int64_t max_positions = 2048;             // config.json max_position_embeddings
};

struct ExportSummary {
  std::vector<std::string> files;  // written, relative to output_dir
  uint64_t tensor_bytes = 0;
  int64_t num_tensors = 0;
  Architecture arch;
};

// Writes the folder from loom tensors (names and shapes of loom_parameter_shapes(model)).
ExportSummary export_hf(const std::map<std::string, torch::Tensor>& loom, const ModelOptions& model,
                        const ExportOptions& o);

// Refuses (UsageError, naming both paths) an export-hf --output that is, or lies inside, a loom
// checkpoint folder (`checkpoint` itself, or any folder holding a step_N, a `latest` or a
// manifest.json), which the export would overwrite; and, without force, a folder that holds files
// already. Paths compare resolved (symlinks, ".."), a not-yet-existing output by its existing part.
void check_export_output(const std::string& output, const std::string& checkpoint, bool force);

// `loom-train export-hf --checkpoint DIR --output OUT [--tokenizer FILE --max-shard-size BYTES
// --dtype D --max-positions N --force]`; args without the subcommand. Returns the exit code (0; --help too); throws on bad input.
int run_export_hf(const std::vector<std::string>& args);

}  // namespace loom::hf
