#include "config.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "loom/cli.h"
#include "loom/error.h"
#include "loom/option_table.h"

namespace loom {

OptimizerOptions TrainConfig::optimizer_options() const {
  OptimizerOptions out;
  out.beta1 = adam.beta1;
  out.beta2 = adam.beta2;
  out.eps = adam.eps;
  out.weight_decay = adam.weight_decay;
  out.decay_embeddings = adam.decay_embeddings;
  out.overlap_update = adam.overlap_update;
  out.clip_grad_norm = hybrid_zero_optimizer.clip_grad_norm;
  return out;
}

LrScheduleOptions TrainConfig::lr_schedule_options() const {
  LrScheduleOptions out;
  out.kind = lr_scheduler.kind;
  out.base_lr = adam.lr;
  out.warmup_ratio = lr_scheduler.warmup_ratio;
  out.init_steps = lr_scheduler.init_steps;
  out.eta_min = lr_scheduler.eta_min;
  out.total_steps = data.total_steps;
  out.decay_ratio = lr_scheduler.decay_ratio;
  return out;
}

void FlagOptions::validate() const {
  LOOM_CHECK(resume.empty() + init_from.empty() + init_from_hf.empty() >= 2,
             "--resume, --init-from and --init-from-hf exclude each other");
}

namespace {

// Each section's checks that span its keys, where its struct keeps them (train_options says which).
void validate_sections(const TrainConfig& c) {
  c.flags.validate();
  c.model.validate();
  c.data.validate();
  c.parallel.validate();
  LrSchedule check(c.lr_schedule_options());  // the lr_scheduler.* keys
}

}  // namespace

namespace {

// Megatron-LM's switches for a resumed schedule, as lr_scheduler.on_resume values.
std::vector<std::string> megatron_switches(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const std::string& a : args) {
    std::string n = a;
    std::replace(n.begin(), n.end(), '_', '-');
    if (n == "--override-opt-param-scheduler") out.push_back("--lr_scheduler.on_resume=apply");
    else if (n == "--use-checkpoint-opt-param-scheduler") out.push_back("--lr_scheduler.on_resume=keep");
    else out.push_back(a);
  }
  return out;
}

}  // namespace

std::optional<TrainConfig> parse_train_config(const std::vector<std::string>& args_in) {
  const std::vector<std::string> args = megatron_switches(args_in);
  TrainConfig c;
  const OptionTable keys = train_options(c);
  OptionParser p("loom-train", "loom-train --config FILE.ini [--section.key=value ...]   (a training run)\n"
                 "       loom-train plan ...        the memory plan of a run (docs/TRAIN.md)\n"
                 "       loom-train export-hf ...   a checkpoint as a Hugging Face folder (docs/HF.md)\n"
                 "       loom-train generate ...    text from a checkpoint (docs/HF.md)\n"
                 "Each subcommand takes --help.");
  keys.declare(p);
  if (!p.parse(args)) return std::nullopt;
  try {
    keys.read(p);
  } catch (const UsageError& e) {
    throw UsageError(str("loom-train: ", e.what()));
  }
  validate_sections(c);
  // Dumped before ckpt.folder is derived: "" there means run_dir/checkpoints (set_run_dir).
  c.resolved_ini = keys.ini(false);
  c.changed_ini = keys.ini(true);
  if (c.ckpt.folder.empty() && !c.job.run_dir.empty()) c.ckpt.folder = c.job.run_dir + "/checkpoints";
  return c;
}

namespace {

// section.key -> value of an INI text as OptionParser::resolved_ini writes it ("[s]", "k = v").
std::map<std::string, std::string> ini_values(const std::string& ini) {
  std::map<std::string, std::string> out;
  std::istringstream in(ini);
  std::string line, section;
  while (std::getline(in, line)) {
    if (!line.empty() && line.front() == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) out[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

// Equal texts, or equal numbers: a checkpoint written before doubles were saved in their shortest
// form holds "1.0000000000000001e-05" where this run writes "1e-05".
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char* end_a = nullptr;
  char* end_b = nullptr;
  const double x = std::strtod(a.c_str(), &end_a), y = std::strtod(b.c_str(), &end_b);
  return !a.empty() && !b.empty() && *end_a == '\0' && *end_b == '\0' && x == y;
}

}  // namespace

std::vector<std::string> model_key_differences(const std::string& saved_ini, const std::string& run_ini) {
  // Tensor shapes can match while the function differs (num_attention_heads, rope_base...): the
  // weights would load and train on as another model.
  static const char* const kFunctionKeys[] = {
      "hidden_size", "num_layers", "num_attention_heads", "num_kv_attention_heads", "mlp_ratio", "vocab_size",
      "layer_norm_epsilon", "qkv_bias", "out_bias", "tie_embeddings", "rope_base"};
  const auto saved = ini_values(saved_ini), now = ini_values(run_ini);
  std::vector<std::string> out;
  for (const char* k : kFunctionKeys) {
    const std::string key = std::string("model.") + k;
    const auto s = saved.find(key), n = now.find(key);
    if (s == saved.end() || n == now.end() || same_value(s->second, n->second)) continue;
    out.push_back(key + ": " + s->second + " -> " + n->second);
  }
  return out;
}

std::string ini_value(const std::string& ini, const std::string& key) {
  const auto values = ini_values(ini);
  const auto it = values.find(key);
  return it == values.end() ? std::string() : it->second;
}

void set_run_dir(TrainConfig& c, const std::string& dir) {
  if (c.ckpt.folder.empty() || c.ckpt.folder == c.job.run_dir + "/checkpoints") c.ckpt.folder = dir + "/checkpoints";
  c.job.run_dir = dir;
  // Rewrite the [job] run_dir line of the resolved INI (OptionParser writes "key = value").
  std::istringstream in(c.resolved_ini);
  std::string line, out, section;
  while (std::getline(in, line)) {
    if (!line.empty() && line.front() == '[') section = line;
    if (section == "[job]" && line.rfind("run_dir =", 0) == 0) line = "run_dir = " + dir;
    out += line + "\n";
  }
  c.resolved_ini = out;
}

}  // namespace loom
