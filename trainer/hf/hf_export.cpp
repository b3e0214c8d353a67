#include "hf_export.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "checkpoint.h"
#include "hf_import.h"
#include "hf_tokenizer.h"
#include "loom/cli.h"
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

namespace fs = std::filesystem;

// step_N or step_N.tmp: a checkpoint's folder, complete or being written (checkpoint.h).
bool is_step_folder_name(std::string name) {
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) name.resize(name.size() - 4);
  return parse_step_name(name) >= 0;
}

// Whether dir holds a loom checkpoint, as checkpoint.h lays one out: a step_N folder (manifest.json,
// or state.json while it is written) or a checkpoints folder (`latest`, step_N sub-folders).
bool is_checkpoint_folder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (const char* f : {"manifest.json", "state.json", "latest"})
    if (fs::exists(dir / f, ec)) return true;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && is_step_folder_name(it->path().filename().string())) return true;
  return false;
}

// Casts each tensor to dtype, or with keep checks it is in dtype already (the embedding's); adds
// up sum's tensor count and bytes. "keep" writes every tensor as it is, bit for bit: loom's final
// norm stays fp32 in a bf16 model (transformers casts it on load); any other mix is refused rather
// than guessed.
void cast_for_export(NamedTensors& tensors, bool keep, torch::Dtype dtype, ExportSummary& sum) {
  for (auto& [name, t] : tensors) {
    if (keep) {
      LOOM_CHECK(t.scalar_type() == dtype || (name == "model.norm.weight" && t.scalar_type() == torch::kFloat32),
                 "export-hf: tensor '", name, "' is ", c10::toString(t.scalar_type()), " while the embedding is ",
                 c10::toString(dtype), "; pass --dtype to export in one dtype");
    } else {
      t = t.to(dtype);
    }
    sum.tensor_bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
  }
  sum.num_tensors = static_cast<int64_t>(tensors.size());
}

// The special token ids for config.json, from the SentencePiece model at path (read into sp), or
// none (-1) without one.
TokenSettings export_tokens(const std::string& path, const ModelOptions& model, int64_t max_positions,
                            spm::SpmModel& sp) {
  TokenSettings tok;
  tok.max_positions = max_positions;
  tok.bos_id = tok.eos_id = tok.pad_id = -1;
  if (path.empty()) return tok;
  sp = spm::read_spm_model(path);
  LOOM_CHECK(sp.size() <= model.vocab_size, "export-hf: the tokenizer ", path, " has ", sp.size(),
             " pieces, more than model.vocab_size ", model.vocab_size);
  tok.bos_id = sp.bos_id;
  tok.eos_id = sp.eos_id;
  tok.pad_id = sp.pad_id;
  return tok;
}

// Shards in model order, each up to max_bytes of tensor data (a larger tensor alone).
std::vector<NamedTensors> split_shards(const NamedTensors& tensors, uint64_t max_bytes) {
  std::vector<NamedTensors> shards(1);
  uint64_t in_shard = 0;
  for (const auto& nt : tensors) {
    const uint64_t n = static_cast<uint64_t>(nt.second.numel()) * nt.second.element_size();
    if (!shards.back().empty() && in_shard + n > max_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(nt);
    in_shard += n;
  }
  return shards;
}

// model.safetensors, or the numbered shards and their index; their names go into sum.files.
void write_weights(const std::string& dir, const std::vector<NamedTensors>& shards, ExportSummary& sum) {
  const safetensors::Metadata meta{{"format", "pt"}};  // transformers checks format == "pt"
  if (shards.size() == 1) {
    safetensors::write(dir + kSingle, shards[0], meta);
    sum.files.push_back(kSingle);
    return;
  }
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

// generation_config.json: the bos and eos ids (null when the tokenizer has none).
void write_generation_config(const std::string& dir, const TokenSettings& tok, ExportSummary& sum) {
  std::ostringstream gen;
  gen << "{\n  \"bos_token_id\": " << (tok.bos_id >= 0 ? std::to_string(tok.bos_id) : "null")
      << ",\n  \"eos_token_id\": " << (tok.eos_id >= 0 ? std::to_string(tok.eos_id) : "null") << "\n}\n";
  write_text(dir + "generation_config.json", gen.str());
  sum.files.push_back("generation_config.json");
}

// Weight files of an earlier export that this one did not write would confuse loaders.
void remove_stale_weights(const std::string& output_dir, const std::vector<std::string>& files) {
  const std::set<std::string> written(files.begin(), files.end());
  for (const std::string& path : sys::list_files(output_dir)) {
    const std::string name = sys::basename(path);
    if (sys::dirname(path) == output_dir && is_weight_file(name) && !written.count(name)) {
      log::info("export-hf: removing ", path, " left by an earlier export");
      sys::remove_file(path);
    }
  }
}

}  // namespace

ExportSummary export_hf(const std::map<std::string, torch::Tensor>& loom, const ModelOptions& model,
                        const ExportOptions& o) {
  LOOM_CHECK(!o.output_dir.empty(), "export-hf: no output folder given");
  LOOM_CHECK(o.max_shard_bytes > 0, "export-hf: --max-shard-size must be positive");
  ExportSummary sum;
  sum.arch = architecture_for(model);
  NamedTensors tensors = to_hf(loom, model);
  // The embedding's dtype is the model's (config.json's torch_dtype).
  const torch::Dtype dtype = export_dtype(o.dtype, tensors.front().second.scalar_type());
  cast_for_export(tensors, o.dtype == "keep", dtype, sum);
  spm::SpmModel sp;
  const TokenSettings tok = export_tokens(o.tokenizer, model, o.max_positions, sp);
  const std::string config = config_json(model, tok, dtype);

  sys::make_dirs(o.output_dir);
  const std::string dir = o.output_dir + "/";
  sys::remove_file(dir + kConfig);  // from here until the end the folder is not a loadable model
  write_weights(dir, split_shards(tensors, o.max_shard_bytes), sum);
  if (!o.tokenizer.empty()) {
    for (const auto& [name, text] : tokenizer_files(sp, o.tokenizer, o.max_positions)) {
      write_text(dir + name, text);
      sum.files.push_back(name);
    }
  }
  write_generation_config(dir, tok, sum);
  remove_stale_weights(o.output_dir, sum.files);
  write_text(dir + kConfig, config);
  sum.files.push_back(kConfig);
  sys::fsync_dir(o.output_dir);
  return sum;
}

void check_export_output(const std::string& output, const std::string& checkpoint, bool force) {
  LOOM_CHECK(!output.empty(), "export-hf: no output folder given");
  // Both with their existing part resolved (symlinks, "..") and the rest appended: two spellings
  // of one folder compare equal, whether it exists yet or not.
  const fs::path out(sys::canonical_path(output));
  const fs::path ck(sys::canonical_path(checkpoint));
  // The output itself and every folder above it: an export anywhere inside a checkpoint folder
  // would overwrite its model.safetensors or sit where the trainer writes its next step_N.
  for (fs::path p = out;; p = p.parent_path()) {
    if (p == ck || is_checkpoint_folder(p)) {
      const std::string shown = p == out ? output : p == ck ? checkpoint : p.string();
      throw UsageError(str("export-hf: --output ", output, p == out ? " is" : " is inside",
                           " the loom checkpoint folder ", shown, " (exporting --checkpoint ", checkpoint,
                           "); the HF files would overwrite or sit among the checkpoint's; choose an output folder "
                           "outside every checkpoint folder"));
    }
    if (p == p.parent_path()) break;
  }
  std::error_code ec;
  LOOM_CHECK(!fs::exists(out, ec) || fs::is_directory(out, ec), "export-hf: --output ", output,
             " exists and is not a folder");
  if (!force && fs::is_directory(out, ec) && !fs::is_empty(out, ec))
    throw UsageError(str("export-hf: --output ", output, " is a folder that holds files already (exporting "
                         "--checkpoint ", checkpoint, "); pass --force to write there (the export replaces the files "
                         "it writes and an earlier export's weight files), or name an empty or new folder"));
}

int run_export_hf(const std::vector<std::string>& args) {
  OptionParser p("loom-train export-hf",
                 "loom-train export-hf --checkpoint DIR --output OUT [--tokenizer FILE.model]\n"
                 "                            [--max-shard-size BYTES] [--dtype keep|float32|bfloat16|float16]\n"
                 "                            [--max-positions N] [--force]");
  ExportOptions o;
  std::string checkpoint;
  bool force = false;
  p.options().add_options()
      ("checkpoint", po::value(&checkpoint)->required(), "loom checkpoint: a step_N folder, or a folder with a `latest` pointer")
      ("output", po::value(&o.output_dir)->required(), "the HF model folder to write")
      ("tokenizer", po::value(&o.tokenizer), "the SentencePiece model the data was tokenized with, copied as "
                                             "tokenizer.model (default: the checkpoint's, recorded with data.tokenizer)")
      ("max-shard-size", po::value(&o.max_shard_bytes)->default_value(o.max_shard_bytes), "bytes of tensors per safetensors file")
      ("dtype", po::value(&o.dtype)->default_value(o.dtype), "keep the checkpoint's dtype, or cast to float32/bfloat16/float16")
      ("max-positions", po::value(&o.max_positions)->default_value(o.max_positions), "max_position_embeddings in config.json")
      ("force", po::bool_switch(&force), "write into a folder that holds files already (never into a checkpoint folder)");
  if (!p.parse(args)) return 0;  // --help
  log::info("export-hf: options that differ from the defaults\n", p.changed_ini());
  check_export_output(o.output_dir, checkpoint, force);  // before anything is read or written

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
