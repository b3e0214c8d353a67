// Loading weights into a loom model from outside a training run: a Hugging Face folder written by
// export-hf or by transformers (the inverse mapping of hf_mapping.h; `--init-from-hf DIR`), or a
// loom checkpoint's model weights (for export-hf and generate).
#pragma once

#include <map>
#include <string>

#include <torch/torch.h>

#include "hf_mapping.h"
#include "model.h"

namespace loom::hf {

struct LoadedWeights {
  std::string dir;                                // where they came from
  ModelOptions model;                             // the shape they need
  std::map<std::string, torch::Tensor> tensors;   // loom names (loom_parameter_shapes(model)), CPU
  std::string tokenizer;                          // the SentencePiece model that goes with them, "" if unknown
  TokenSettings tokens;                           // bos/eos ids (HF folders; -1 where unknown)
};

// DIR/config.json + DIR/model.safetensors, or the shards DIR/model.safetensors.index.json names.
// Refuses configurations loom cannot represent (hf_mapping.h), and missing, extra or misshapen
// tensors, naming the file.
LoadedWeights load_hf(const std::string& dir);

// The model weights of a loom checkpoint (a step_N folder, or a folder whose `latest` names one).
LoadedWeights load_loom_checkpoint(const std::string& dir);

// Copies tensors into model's parameters (every parameter exactly once, shapes equal; a dtype
// other than the parameter's is cast, and said once in the log). where names the source in errors.
void load_into(InternLMImpl& model, const std::map<std::string, torch::Tensor>& tensors, const std::string& where);

// --init-from-hf DIR: the folder's architecture must equal model's (every model.* shape key is
// compared and each difference named), then its weights are loaded into model.
void init_from_hf(InternLMImpl& model, const std::string& dir);

}  // namespace loom::hf
