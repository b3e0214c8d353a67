#include "hf_export.h"

#include <cstdio>
#include <set>
#include <sstream>

#include "checkpoint.h"
#include "hf_import.h"
#include "hf_tokenizer.h"
#include "loom/error.h"
#include "loom/log.h"
#include "loom/options.h"
#include "loom/progress.h"
#include "loom/sys.h"
#include "safetensors.h"

namespace loom::hf {

namespace {

constexpr const char* kConfig = "config.json";
constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
  return buf;
}

// model.safetensors, its index, or model-NNNNN-of-NNNNN.safetensors: what an export may own.
bool is_weight_file(const std::string& name) {
  if (name == kSingle || name == kIndex) return true;
  unsigned a = 0, b = 0;
  char tail[32] = {0};
  return name.size() == shard_name(1, 1).size() &&
         std::sscanf(name.c_str(), "model-%5u-of-%5u.%31s", &a, &b, tail) == 3 && std::string(tail) == "safetensors";
}

torch::Dtype export_dtype(const std::string& d, torch::Dtype keep) {
  if (d == "keep") return keep;
  return parse_dtype(d);
}

void write_text(const std::string& path, const std::string& text) {
  sys::AtomicFile f(path);
  f.write(text);
  f.commit();
}

}  // namespace

ExportSummary export_hf(const std::map<std::string, torch::Tensor>& loom, const ModelOptions& model,
                        const ExportOptions& o) {
  LOOM_CHECK(!o.output_dir.empty(), "export-hf: no output folder given");
  LOOM_CHECK(o.max_shard_bytes > 0, "export-hf: --max-shard-size must be positive");
  ExportSummary sum;
  sum.arch = architecture_for(model);
  NamedTensors tensors = to_hf(loom, model);

  // The embedding's dtype is the model's (config.json's torch_dtype). "keep" writes every tensor as
  // it is, bit for bit: loom's final norm stays fp32 in a bf16 model (transformers casts it on load);
  // any other mix is refused rather than guessed.
  const torch::Dtype keep = tensors.front().second.scalar_type();
  const torch::Dtype dtype = export_dtype(o.dtype, keep);
  for (auto& [name, t] : tensors) {
    if (o.dtype == "keep") {
      LOOM_CHECK(t.scalar_type() == keep || (name == "model.norm.weight" && t.scalar_type() == torch::kFloat32),
                 "export-hf: tensor '", name, "' is ", c10::toString(t.scalar_type()), " while the embedding is ",
                 c10::toString(keep), "; pass --dtype to export in one dtype");
    } else {
      t = t.to(dtype);
    }
    sum.tensor_bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
  }
  sum.num_tensors = static_cast<int64_t>(tensors.size());

  TokenSettings tok;
  tok.max_positions = o.max_positions;
  tok.bos_id = tok.eos_id = tok.pad_id = -1;
  spm::SpmModel sp;
  if (!o.tokenizer.empty()) {
    sp = spm::read_spm_model(o.tokenizer);
    LOOM_CHECK(sp.size() <= model.vocab_size, "export-hf: the tokenizer ", o.tokenizer, " has ", sp.size(),
               " pieces, more than model.vocab_size ", model.vocab_size);
    tok.bos_id = sp.bos_id;
    tok.eos_id = sp.eos_id;
    tok.pad_id = sp.pad_id;
  }
  const std::string config = config_json(model, tok, dtype);

  sys::make_dirs(o.output_dir);
  const std::string dir = o.output_dir + "/";
  sys::remove_file(dir + kConfig);  // from here until the end the folder is not a loadable model

  // Shards in model order, each up to max_shard_bytes of tensor data (a larger tensor alone).
  std::vector<NamedTensors> shards(1);
  uint64_t in_shard = 0;
  for (auto& nt : tensors) {
    const uint64_t n = static_cast<uint64_t>(nt.second.numel()) * nt.second.element_size();
    if (!shards.back().empty() && in_shard + n > o.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(nt);
    in_shard += n;
  }
  const safetensors::Metadata meta{{"format", "pt"}};  // transformers checks format == "pt"
  if (shards.size() == 1) {
    safetensors::write(dir + kSingle, shards[0], meta);
    sum.files.push_back(kSingle);
  } else {
    std::ostringstream index;
    index << "{\n  \"metadata\": {\"total_size\": " << sum.tensor_bytes << "},\n  \"weight_map\": {";
    bool first = true;
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string name = shard_name(k + 1, shards.size());
      safetensors::write(dir + name, shards[k], meta);
      sum.files.push_back(name);
      for (const auto& nt : shards[k]) {
        index << (first ? "\n" : ",\n") << "    \"" << nt.first << "\": \"" << name << "\"";
        first = false;
      }
    }
    index << "\n  }\n}\n";
    write_text(dir + kIndex, index.str());
    sum.files.push_back(kIndex);
  }

  if (!o.tokenizer.empty()) {
    for (const auto& [name, text] : tokenizer_files(sp, o.tokenizer, o.max_positions)) {
      write_text(dir + name, text);
      sum.files.push_back(name);
    }
  }
  std::ostringstream gen;
  gen << "{\n  \"bos_token_id\": " << (tok.bos_id >= 0 ? std::to_string(tok.bos_id) : "null")
      << ",\n  \"eos_token_id\": " << (tok.eos_id >= 0 ? std::to_string(tok.eos_id) : "null") << "\n}\n";
  write_text(dir + "generation_config.json", gen.str());
  sum.files.push_back("generation_config.json");

  // Weight files of an earlier export that this one did not write would confuse loaders.
  const std::set<std::string> written(sum.files.begin(), sum.files.end());
  for (const std::string& path : sys::list_files(o.output_dir)) {
    const std::string name = sys::basename(path);
    if (sys::dirname(path) == o.output_dir && is_weight_file(name) && !written.count(name)) {
      log::info("export-hf: removing ", path, " left by an earlier export");
      sys::remove_file(path);
    }
  }
  write_text(dir + kConfig, config);
  sum.files.push_back(kConfig);
  sys::fsync_dir(o.output_dir);
  return sum;
}

int run_export_hf(const std::vector<std::string>& args) {
  OptionParser p("loom-train export-hf",
                 "loom-train export-hf --checkpoint DIR --output OUT [--tokenizer FILE.model]\n"
                 "                            [--max-shard-size BYTES] [--dtype keep|float32|bfloat16|float16]\n"
                 "                            [--max-positions N]");
  ExportOptions o;
  std::string checkpoint;
  p.options().add_options()
      ("checkpoint", po::value(&checkpoint)->required(), "loom checkpoint: a step_N folder, or a folder with a `latest` pointer")
      ("output", po::value(&o.output_dir)->required(), "the HF model folder to write")
      ("tokenizer", po::value(&o.tokenizer), "the SentencePiece model the data was tokenized with, copied as "
                                             "tokenizer.model (default: the checkpoint's, recorded with data.tokenizer)")
      ("max-shard-size", po::value(&o.max_shard_bytes)->default_value(o.max_shard_bytes), "bytes of tensors per safetensors file")
      ("dtype", po::value(&o.dtype)->default_value(o.dtype), "keep the checkpoint's dtype, or cast to float32/bfloat16/float16")
      ("max-positions", po::value(&o.max_positions)->default_value(o.max_positions), "max_position_embeddings in config.json");
  if (!p.parse(args)) return 0;  // --help
  log::info("export-hf: options that differ from the defaults\n", p.changed_ini());

  const LoadedWeights ck = load_loom_checkpoint(checkpoint);
  // The checkpoint's copy (a run with data.tokenizer records one), or the given one checked against it.
  o.tokenizer = checkpoint_tokenizer(ck.dir, o.tokenizer);
  LOOM_CHECK(!o.tokenizer.empty(), "export-hf: pass --tokenizer FILE.model (the SentencePiece model the data of ",
             ck.dir, " was tokenized with; a run given data.tokenizer records it in its checkpoints); the HF folder "
             "needs it");
  const ExportSummary s = export_hf(ck.tensors, ck.model, o);
  log::info("export-hf: wrote ", o.output_dir, ": ", s.arch.name, ", ", s.num_tensors, " tensors, ",
            format_bytes(static_cast<double>(s.tensor_bytes)), " in ", s.files.size(), " files");
  return 0;
}

}  // namespace loom::hf
