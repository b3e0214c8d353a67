#include "config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "loom/cli.h"
#include "loom/error.h"
#include "loom/option_table.h"
#include "loom/sys.h"
#include "size_limits.h"

namespace loom {

OptimizerOptions TrainConfig::optimizer_options() const { return OptimizerOptions{{adam}, {hybrid_zero_optimizer}}; }

LrScheduleOptions TrainConfig::lr_schedule_options() const {
  LrScheduleOptions out;
  static_cast<LrSchedulerOptions&>(out) = lr_scheduler;
  out.base_lr = adam.lr;
  out.total_steps = data.total_steps;
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
  check_batch_limits(c.data.micro_bsz, c.data.seq_len, c.data.micro_num);
  c.adam.validate();
  c.hybrid_zero_optimizer.validate();
  c.parallel.validate();
  c.monitor.alerts.validate();
  LrSchedule check(c.lr_schedule_options());  // the lr_scheduler.* keys
}

// Megatron-LM's flags that are one loom key under another name (train_options' keys, --help lists them).
const std::pair<const char*, const char*> kMegatronAliases[] = {
    {"train-iters", "data.total_steps"},
    {"micro-batch-size", "data.micro_bsz"},
    {"global-batch-size", "data.global_batch_size"},
    {"seq-length", "data.seq_len"},
    {"eval-interval", "data.valid_every"},
    {"eval-iters", "data.valid_micro_num"},
    {"lr", "adam.lr"},
    {"min-lr", "lr_scheduler.eta_min"},
    {"lr-warmup-iters", "lr_scheduler.warmup_steps"},
    {"weight-decay", "adam.weight_decay"},
    {"clip-grad", "hybrid_zero_optimizer.clip_grad_norm"},
    {"seed", "job.seed"},
    {"num-layers", "model.num_layers"},
    {"hidden-size", "model.hidden_size"},
    {"num-attention-heads", "model.num_attention_heads"},
    {"save", "ckpt.save_ckpt_folder"},
    {"save-interval", "ckpt.checkpoint_every"},
};

// Megatron-LM's flags that need a translation, read off the command line before the parse; those
// that depend on other keys are applied to the parsed config (apply_megatron), so that config.ini
// records the loom keys they became.
struct MegatronFlags {
  std::string load;                             // --load DIR
  bool wsd = false;                             // --lr-decay-style WSD
  std::string wsd_decay_style = "exponential";  // --lr-wsd-decay-style: Megatron-LM's default
  std::string wsd_decay_iters;                  // --lr-wsd-decay-iters
};

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string without_trailing_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// --data-path: one folder, or Megatron's blend "W1 PREFIX1 W2 PREFIX2 ..." whose prefixes are
// sub-folders of one parent: data.train_folder=PARENT, data.dataset_weights=NAME:W and
// data.mixture=proportional (Megatron's weights are shares of every batch; loom's datasets are the
// sub-folders of data.train_folder; other sub-folders there get weight 0, as Megatron-LM reads only
// the prefixes it is given).
std::vector<std::string> megatron_data_path(const std::vector<std::string>& words) {
  static const char* const kLayout =
      ": loom trains on data.train_folder, a folder of packed shards whose sub-folders are its named datasets "
      "(data.dataset_weights \"name:weight\"); --data-path takes one such folder, or \"W1 DIR1 W2 DIR2 ...\" "
      "with every DIR a sub-folder of one parent";
  std::string given;
  for (const std::string& w : words) given += (given.empty() ? "" : " ") + w;
  if (words.empty()) throw UsageError(str("--data-path needs a value", kLayout));
  if (words.size() == 1) return {"--data.train_folder=" + words[0]};
  if (words.size() % 2 != 0) throw UsageError(str("--data-path '", given, "': not weight-prefix pairs", kLayout));
  std::string parent, weights;
  std::vector<std::string> names;
  for (size_t i = 0; i < words.size(); i += 2) {
    const std::string& w = words[i];
    char* end = nullptr;
    const double v = std::strtod(w.c_str(), &end);
    if (w.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
      throw UsageError(str("--data-path '", given, "': '", w, "' is not a weight >= 0", kLayout));
    const std::string dir = without_trailing_slash(words[i + 1]);
    const size_t slash = dir.rfind('/');
    const std::string up = slash == std::string::npos ? "." : dir.substr(0, std::max<size_t>(slash, 1));
    const std::string name = slash == std::string::npos ? dir : dir.substr(slash + 1);
    if (i == 0) parent = up;
    if (up != parent || name.empty() || name == "." || name == "..")
      throw UsageError(str("--data-path '", given, "': ", words[i + 1], " is not a sub-folder of ", parent, kLayout));
    if (std::find(names.begin(), names.end(), name) != names.end())
      throw UsageError(str("--data-path '", given, "': ", name, " is given twice"));
    names.push_back(name);
    weights += (weights.empty() ? "" : ",") + name + ":" + w;
  }
  if (sys::is_directory(parent))
    for (const std::string& entry : sys::list_dir(parent)) {
      const std::string name = sys::basename(entry);
      if (sys::is_directory(parent + "/" + name) && std::find(names.begin(), names.end(), name) == names.end())
        weights += "," + name + ":0";
    }
  return {"--data.train_folder=" + parent, "--data.dataset_weights=" + weights, "--data.mixture=proportional"};
}

// Megatron-LM's flags as loom's: the scheduler switches as lr_scheduler.on_resume values, the
// decay styles loom has as lr_scheduler.kind, the others refused with what loom offers.
std::vector<std::string> megatron_flags(const std::vector<std::string>& args, MegatronFlags* m) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const size_t eq = a.find('=');
    std::string n = a.substr(0, eq);
    std::replace(n.begin(), n.end(), '_', '-');
    // The flag's value: after '=', else the next argument (argparse takes both).
    const auto value = [&]() -> std::string {
      if (eq != std::string::npos) return a.substr(eq + 1);
      if (i + 1 >= args.size()) throw UsageError(str(n, " needs a value"));
      return args[++i];
    };
    if (n == "--override-opt-param-scheduler") {
      out.push_back("--lr_scheduler.on_resume=apply");
    } else if (n == "--use-checkpoint-opt-param-scheduler") {
      out.push_back("--lr_scheduler.on_resume=keep");
    } else if (n == "--lr-decay-style") {
      const std::string style = value();
      if (style == "cosine" || style == "constant") {
        out.push_back("--lr_scheduler.kind=" + style);
      } else if (style == "WSD") {
        m->wsd = true;
        out.push_back("--lr_scheduler.kind=wsd");
      } else {
        throw UsageError(str("--lr-decay-style ", style, ": no such loom schedule; loom offers cosine, constant and "
                             "wsd (lr_scheduler.kind; Megatron-LM's WSD with --lr-wsd-decay-style linear is wsd)"));
      }
    } else if (n == "--lr-wsd-decay-style") {
      m->wsd_decay_style = value();
    } else if (n == "--lr-wsd-decay-iters") {
      m->wsd_decay_iters = value();
    } else if (n == "--load") {
      m->load = value();
    } else if (n == "--data-path") {
      // argparse's nargs='*': the words up to the next flag, each maybe several in one quoted argument.
      std::vector<std::string> words;
      if (eq != std::string::npos) words = split_words(a.substr(eq + 1));
      while (eq == std::string::npos && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
        for (const std::string& w : split_words(args[++i])) words.push_back(w);
      for (std::string& t : megatron_data_path(words)) out.push_back(std::move(t));
    } else {
      out.push_back(a);
    }
  }
  return out;
}

// lr_scheduler.decay_ratio for Megatron-LM's WSD over `iters` of `total` updates: loom's wsd
// decays over the last int(total * ratio) updates, so the ratio must give back exactly `iters`.
double wsd_decay_ratio(int64_t iters, int64_t total) {
  double r = static_cast<double>(iters) / static_cast<double>(total);
  for (int tries = 0; tries < 4 && static_cast<int64_t>(static_cast<double>(total) * r) < iters; ++tries)
    r = std::nextafter(r, 2.0);
  if (static_cast<int64_t>(static_cast<double>(total) * r) != iters)
    throw UsageError(str("--lr-wsd-decay-iters ", iters, ": no lr_scheduler.decay_ratio gives int(", total,
                         " * ratio) = ", iters, " exactly"));
  return r;
}

void apply_megatron(const MegatronFlags& m, TrainConfig& c) {
  if (!m.load.empty()) {
    // Megatron-LM's --load DIR resumes from DIR's newest checkpoint (latest_checkpointed_iteration.txt)
    // and starts fresh when there is none: loom's --resume auto over its checkpoint folder.
    if (!c.flags.resume.empty())
      throw UsageError(str("--load ", m.load, " is --resume auto over ", m.load, ": give one of --load and --resume"));
    if (c.ckpt.folder.empty()) {
      c.ckpt.folder = m.load;
    } else if (sys::canonical_path(c.ckpt.folder) != sys::canonical_path(m.load)) {
      throw UsageError(str("--load ", m.load, " with ckpt.save_ckpt_folder (--save) ", c.ckpt.folder,
                           ": loom resumes the newest checkpoint of the folder it saves to (--resume auto), or one "
                           "step_N folder (--resume ", m.load, "/step_N); give --save ", m.load, " too, or --resume"));
    }
    c.flags.resume = "auto";
  }
  if (m.wsd) {
    if (m.wsd_decay_style != "linear")
      throw UsageError(str("--lr-decay-style WSD with --lr-wsd-decay-style ", m.wsd_decay_style,
                           " (Megatron-LM's default is exponential): loom's wsd decays linearly to eta_min; pass "
                           "--lr-wsd-decay-style linear"));
    if (m.wsd_decay_iters.empty())
      throw UsageError("--lr-decay-style WSD needs --lr-wsd-decay-iters (the updates of the final decay)");
    int64_t iters = 0;
    read_option("lr-wsd-decay-iters", m.wsd_decay_iters, &iters);
    const int64_t total = c.data.total_steps;
    if (iters < 1 || iters > total)
      throw UsageError(str("--lr-wsd-decay-iters must be in [1, data.total_steps = ", total, "], got ", iters));
    const LrSchedule warm(c.lr_schedule_options());
    // Megatron-LM counts the decay from total - iters even inside the warmup; loom's wsd starts it
    // at the warmup's end: the same schedule only when the decay starts after the warmup.
    if (total - iters < warm.warmup_end())
      throw UsageError(str("--lr-wsd-decay-iters ", iters, ": the decay would start at update ", total - iters,
                           ", inside the warmup (ending at ", warm.warmup_end(),
                           "), where loom's wsd and Megatron-LM's WSD differ"));
    c.lr_scheduler.decay_ratio = wsd_decay_ratio(iters, total);
  }
}

}  // namespace

std::optional<TrainConfig> parse_train_config(const std::vector<std::string>& args_in) {
  MegatronFlags megatron;
  const std::vector<std::string> args = megatron_flags(args_in, &megatron);
  TrainConfig c;
  const OptionTable keys = train_options(c);
  OptionParser p("loom-train", "loom-train --config FILE.ini [--section.key=value ...]   (a training run)\n"
                 "       loom-train plan ...        the memory plan of a run (docs/TRAIN.md)\n"
                 "       loom-train export-hf ...   a checkpoint as a Hugging Face folder (docs/HF.md)\n"
                 "       loom-train generate ...    text from a checkpoint (docs/HF.md)\n"
                 "Each subcommand takes --help.");
  keys.declare(p);
  for (const auto& [name, target] : kMegatronAliases) p.alias(name, target);
  if (!p.parse(args)) return std::nullopt;
  // A value outside its range or size limit is a usage error (exit 2, loom/cli.h) as much as one
  // that does not parse, whichever check found it: the table's (in keys.read), a section's
  // validate() or the schedule's.
  try {
    keys.read(p);
    apply_megatron(megatron, c);
    validate_sections(c);
  } catch (const UsageError& e) {
    throw UsageError(str("loom-train: ", e.what()));
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
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

namespace {

// KEY's line of SECTION in an INI text as OptionTable::ini writes it: replaced where present, else
// added at the end of its section (or of the text, with the section).
std::string with_ini_value(const std::string& ini, const std::string& section, const std::string& key,
                           const std::string& value) {
  std::istringstream in(ini);
  std::string line, out, current;
  bool done = false;
  const std::string want = "[" + section + "]", entry = key + " = " + value + "\n";
  while (std::getline(in, line)) {
    if (!line.empty() && line.front() == '[') {
      if (current == want && !done) out += entry, done = true;  // leaving the section without the key
      current = line;
    }
    if (current == want && !done && line.rfind(key + " = ", 0) == 0) {
      out += entry;
      done = true;
      continue;
    }
    out += line + "\n";
  }
  if (!done) out += (current == want ? "" : want + "\n") + entry;
  return out;
}

}  // namespace

void derive_micro_num(TrainConfig& c, int64_t world) {
  DataOptions& d = c.data;
  if (d.global_batch_size == 0) return;
  const int64_t per_micro = d.micro_bsz * world;
  LOOM_CHECK(d.global_batch_size % per_micro == 0, "data.global_batch_size ", d.global_batch_size,
             " is not a multiple of data.micro_bsz ", d.micro_bsz, " x world size ", world, " = ", per_micro,
             " (data.micro_num = global_batch_size / (micro_bsz * world size))");
  const int64_t m = d.global_batch_size / per_micro;
  LOOM_CHECK(d.micro_num == DataOptions{}.micro_num || d.micro_num == m, "data.micro_num ", d.micro_num,
             " and data.global_batch_size ", d.global_batch_size, " disagree: micro_bsz ", d.micro_bsz, " x micro_num ",
             d.micro_num, " x world size ", world, " = ", d.micro_bsz * d.micro_num * world, "; give one of them");
  if (d.micro_num == m) return;
  d.micro_num = m;
  c.resolved_ini = with_ini_value(c.resolved_ini, "data", "micro_num", std::to_string(m));
  c.changed_ini = with_ini_value(c.changed_ini, "data", "micro_num", std::to_string(m));
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
