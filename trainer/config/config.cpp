#include "config.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "attention_select.h"
#include "loom/cli.h"
#include "loom/error.h"
#include "loom/options.h"

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

std::optional<TrainConfig> parse_train_config(const std::vector<std::string>& args) {
  TrainConfig c;
  std::string dtype = "float32";
  std::string precision = "bf16";
  std::string checkpoint = "0";

  OptionParser p("loom-train", "loom-train --config FILE.ini [--section.key=value ...]   (a training run)\n"
                 "       loom-train plan ...        the memory plan of a run (docs/TRAIN.md)\n"
                 "       loom-train export-hf ...   a checkpoint as a Hugging Face folder (docs/HF.md)\n"
                 "       loom-train generate ...    text from a checkpoint (docs/HF.md)\n"
                 "Each subcommand takes --help.");
  // clang-format off
  p.options().add_options()
    ("resume", po::value(&c.flags.resume)->default_value(""), "auto (the checkpoint `latest` names in "
        "ckpt.save_ckpt_folder, walking back past damaged ones; all damaged is an error), auto-or-fresh (the same, "
        "but all damaged starts fresh), a step_N folder, or empty to start fresh")
    ("init-from", po::value(&c.flags.init_from)->default_value(""), "a step_N folder whose model weights start the run")
    ("init-from-hf", po::value(&c.flags.init_from_hf)->default_value(""), "a Hugging Face folder (export-hf's or "
        "transformers') whose weights start the run; its architecture must equal model.*")
    ("profile-memory", po::bool_switch(&c.flags.profile_memory), "CUDA: write run_dir/memory_profile.json (parameters, "
        "gradients, optimizer state, activations) after the second step")
    ("profiling", po::bool_switch(&c.flags.profiling), "record steps 2-4 with LibTorch's profiler (chrome trace in run_dir)")
    ("job.run_dir", po::value(&c.job.run_dir)->default_value(""), "output folder: metrics.jsonl, tensorboard/, "
        "checkpoints/ (default runs/run_YYYYMMDD_HHMMSS from rank 0's launch time, UTC)")
    ("job.device", po::value(&c.job.device)->default_value("cpu"), "cpu, cuda or cuda:N")
    ("job.attention", po::value(&c.job.attention)->default_value("auto"), "attention kernel: auto, cudnn, flash, segments or masked")
    ("job.seed", po::value(&c.job.seed)->default_value(1024), "seed of the model initialisation and dropout")
    ("job.threads", po::value(&c.job.threads)->default_value(0), "torch intra-op threads (0 = LibTorch's default)")
    ("job.log_every", po::value(&c.job.log_every)->default_value(1), "steps between metrics lines")
    ("job.peak_tflops", value_with_default(&c.job.peak_tflops, 1.0), "peak TFLOP/s of one device, for MFU")
    ("job.tensorboard", value_with_default(&c.job.tensorboard, true), "write tensorboard/ event files")
    ("job.overwrite", value_with_default(&c.job.overwrite, false), "a fresh run into a run_dir that holds an "
        "earlier run moves it to RUN_DIR.old-YYYYMMDD_HHMMSS (never deletes); false: such a run is refused")
    ("data.seq_len", po::value(&c.data.seq_len)->default_value(2048), "tokens per pack (T)")
    ("data.micro_bsz", po::value(&c.data.micro_bsz)->default_value(1), "packs per micro-batch (B)")
    ("data.micro_num", po::value(&c.data.micro_num)->default_value(1), "micro-batches per step (gradient accumulation)")
    ("data.total_steps", po::value(&c.data.total_steps)->default_value(100), "optimizer steps of the run")
    ("data.valid_every", po::value(&c.data.valid_every)->default_value(0), "steps between validations (0 = at the end)")
    ("data.valid_micro_num", po::value(&c.data.valid_micro_num)->default_value(0), "micro-batches per dataset and validation (0 = all; Megatron's eval-iters)")
    ("data.skip_batches", po::value(&c.data.skip_batches)->default_value(""), "steps whose data is consumed without an update, \"a-b,c\"")
    ("data.train_folder", po::value(&c.data.train_folder)->required(), "folder of packed shards (sub-folders = named datasets)")
    ("data.valid_folder", po::value(&c.data.valid_folder)->default_value(""), "folder of packed shards for validation")
    ("data.seed", po::value(&c.data.seed)->default_value(1024), "sampler seed")
    ("data.prefetch", po::value(&c.data.prefetch)->default_value(4), "micro-batches built ahead by the loader thread")
    ("data.dataset_weights", po::value(&c.data.dataset_weights)->default_value(""), "\"name:weight,...\" (unlisted = 1)")
    ("data.tokenizer", po::value(&c.data.tokenizer)->default_value(""), "the SentencePiece .model the data was "
        "tokenized with: checked against the shards' fingerprint and copied into every checkpoint (export-hf and "
        "generate then need no --tokenizer)")
    ("data.verify_checksums", value_with_default(&c.data.verify_checksums, true), "read every shard fully at start: ids and xxh64 against its .meta")
    ("model.hidden_size", po::value(&c.model.hidden_size)->default_value(512), "C")
    ("model.num_layers", po::value(&c.model.num_layers)->default_value(4), "layers")
    ("model.num_attention_heads", po::value(&c.model.num_attention_heads)->default_value(8), "H")
    ("model.num_kv_attention_heads", po::value(&c.model.num_kv_attention_heads)->default_value(0), "K (GQA; 0 = H)")
    ("model.mlp_ratio", value_with_default(&c.model.mlp_ratio, 8.0 / 3.0), "F = 256*ceil(C*mlp_ratio/256)")
    ("model.vocab_size", po::value(&c.model.vocab_size)->default_value(103168), "V (>= the data's vocabulary)")
    ("model.layer_norm_epsilon", value_with_default(&c.model.norm_eps, 1e-5), "RMSNorm epsilon")
    ("model.qkv_bias", value_with_default(&c.model.qkv_bias, true), "bias on the fused QKV projection")
    ("model.out_bias", value_with_default(&c.model.out_bias, true), "bias on the attention output projection")
    ("model.tie_embeddings", value_with_default(&c.model.tie_embeddings, false), "head shares the embedding")
    ("model.init_std", value_with_default(&c.model.init_std, 0.02), "normal init std")
    ("model.scaled_init", value_with_default(&c.model.scaled_init, true), "wo, w3 init std / sqrt(2*layers)")
    ("model.dropout", value_with_default(&c.model.dropout, 0.0), "residual dropout")
    ("model.checkpoint", po::value(&checkpoint)->default_value("0"), "fraction of layers recomputed in backward, or "
        "auto: the smallest fraction whose memory plan fits the device with model.checkpoint_margin to spare")
    ("model.checkpoint_margin", value_with_default(&c.model.checkpoint_margin, 0.08), "model.checkpoint=auto: "
        "fraction of the device's memory the plan leaves free")
    ("model.rope_base", value_with_default(&c.model.rope_base, 10000.0), "rotary base")
    ("model.dtype", po::value(&dtype)->default_value("float32"), "float32, bfloat16 or float16")
    ("model.precision", po::value(&precision)->default_value("bf16"), "bf16: matmuls in model.dtype; fp8: the "
        "layers' linears (wqkv, wo, w1, w2, w3) in FP8 on GPUs with FP8 tensor cores (model.dtype=bfloat16)")
    ("adam.lr", value_with_default(&c.adam.lr, 1e-4), "peak learning rate")
    ("adam.adam_beta1", value_with_default(&c.adam.beta1, 0.9), "beta1")
    ("adam.adam_beta2", value_with_default(&c.adam.beta2, 0.95), "beta2")
    ("adam.adam_eps", value_with_default(&c.adam.eps, 1e-8), "eps")
    ("adam.weight_decay", value_with_default(&c.adam.weight_decay, 0.01), "decoupled weight decay of matrices")
    ("adam.decay_embeddings", value_with_default(&c.adam.decay_embeddings, false), "also decay embeddings")
    ("adam.overlap_update", value_with_default(&c.adam.overlap_update, true), "CUDA, replicated optimizer: the "
        "update runs layer by layer beside the next step's forward (same weights, bitwise)")
    ("hybrid_zero_optimizer.clip_grad_norm", value_with_default(&c.hybrid_zero_optimizer.clip_grad_norm, 1.0), "global-norm clip (0 = off)")
    ("lr_scheduler.kind", po::value(&c.lr_scheduler.kind)->default_value("cosine"), "cosine, constant or wsd (warmup-stable-decay: extendable)")
    ("lr_scheduler.decay_ratio", value_with_default(&c.lr_scheduler.decay_ratio, 0.1), "wsd: the final linear decay to eta_min, a fraction of total_steps")
    ("lr_scheduler.on_resume", po::value(&c.lr_scheduler.on_resume)->default_value("refuse"), "a resume whose schedule keys differ from the checkpoint's: refuse, apply (this run's keys from this step) or keep (the checkpoint's)")
    ("lr_scheduler.warmup_ratio", value_with_default(&c.lr_scheduler.warmup_ratio, 0.01), "warmup = int(total_steps*ratio)")
    ("lr_scheduler.init_steps", po::value(&c.lr_scheduler.init_steps)->default_value(0), "updates at lr 0 before warmup")
    ("lr_scheduler.eta_min", value_with_default(&c.lr_scheduler.eta_min, 1e-5), "final learning rate")
    ("loss.label_smoothing", value_with_default(&c.loss.label_smoothing, 0.0), "label smoothing")
    ("ckpt.enable_save_ckpt", value_with_default(&c.ckpt.enable_save, true), "write checkpoints")
    ("ckpt.checkpoint_every", po::value(&c.ckpt.checkpoint_every)->default_value(0), "steps between checkpoints (0 = at the end)")
    ("ckpt.save_ckpt_folder", po::value(&c.ckpt.folder)->default_value(""), "checkpoint folder (default run_dir/checkpoints)")
    ("ckpt.keep", po::value(&c.ckpt.keep)->default_value(2), "checkpoints kept (0 = all)")
    ("parallel.zero1", po::value(&c.parallel.zero1)->default_value(1), "optimizer-state shards over the "
        "data-parallel ranks (1 = off, -1 = every rank; must divide the world size)")
    ("parallel.zero_stage", po::value(&c.parallel.zero_stage)->default_value(1), "what parallel.zero1 shards: "
        "1 optimizer state, 2 + gradients, 3 + weights")
    ("parallel.bucket_mb", value_with_default(&c.parallel.bucket_mb, 25.0), "gradient all-reduce bucket (MiB)")
    ("parallel.timeout_s", value_with_default(&c.parallel.timeout_s, 600.0), "a collective waiting longer "
        "fails the job with a report")
    ("parallel.backend", po::value(&c.parallel.backend)->default_value("auto"), "auto (nccl on CUDA, else gloo), gloo or nccl")
    ("monitor.alert_webhook", po::value(&c.monitor.alerts.webhook)->default_value(""), "http:// URL that receives "
        "each alert as a JSON POST (\"\" = off)")
    ("monitor.alert_command", po::value(&c.monitor.alerts.command)->default_value(""), "shell command run with each "
        "alert's JSON on stdin (\"\" = off)")
    ("monitor.alert_timeout_s", value_with_default(&c.monitor.alerts.timeout_s, 5.0), "bound of one delivery")
    ("monitor.hang_timeout", value_with_default(&c.monitor.hang_timeout, 0.0), "seconds without a finished "
        "step before the watchdog reports every thread's phase and exits 4 (0 = off)")
    ("monitor.spike_ratio", value_with_default(&c.monitor.spike.ratio, 0.0), "a loss above this x the median "
        "of the last spike_window losses is a spike (0 = off)")
    ("monitor.spike_window", po::value(&c.monitor.spike.window)->default_value(50), "losses in the spike reference")
    ("monitor.skip_spike_batches", value_with_default(&c.monitor.spike.exclude_spikes, false), "skip the "
        "update of a spike step (its index is logged for data.skip_batches)")
    ("monitor.diag_every", po::value(&c.monitor.diag_every)->default_value(0), "steps between per-rank step-time "
        "reports (0 = off)")
    ("monitor.diag_outlier_ratio", value_with_default(&c.monitor.diag_outlier_ratio, 1.5), "a rank slower "
        "than this x the median is flagged")
    ("monitor.startup_probe", value_with_default(&c.monitor.startup_probe, true), "time a matmul (and an "
        "all-reduce) on every rank at start and flag slow ranks")
    ("ckpt.stop_file", po::value(&c.ckpt.stop_file)->default_value(""), "InternLM's stop file: -N saves at step "
        "N, +N saves and quits at step N")
    ("ckpt.async_save", value_with_default(&c.ckpt.async_save, false), "write checkpoints from a background "
        "thread (training blocks only for the copy)")
    ("debug.hang_at_step", po::value(&c.debug.hang_at_step)->default_value(-1), "TEST ONLY: step N's forward never ends")
    ("debug.spike_at_step", po::value(&c.debug.spike_at_step)->default_value(-1), "TEST ONLY: step N's loss looks 100x larger")
    ("debug.kill_at_step", po::value(&c.debug.kill_at_step)->default_value(-1), "TEST ONLY: SIGKILL during step N")
    ("debug.kill_at_layer", po::value(&c.debug.kill_at_layer)->default_value(-1), "TEST ONLY: with debug.kill_at_step, "
        "SIGKILL before layer L's forward (mid-step, between a ZeRO-3 gather and the next)")
    ("debug.kill_in_save", po::value(&c.debug.kill_in_save)->default_value(-1), "TEST ONLY: SIGKILL inside the "
        "save of step N (after its model file)")
    ("debug.inject_nan_step", po::value(&c.debug.inject_nan_step)->default_value(-1), "TEST ONLY: make step N's gradients NaN")
    ("debug.stop_at_step", po::value(&c.debug.stop_at_step)->default_value(-1), "TEST ONLY: stop as on SIGTERM once N steps are done")
    ("debug.pause_at_step", po::value(&c.debug.pause_at_step)->default_value(-1), "TEST ONLY: once N steps are done, "
        "wait for SIGTERM or SIGINT");
  // clang-format on
  if (!p.parse(args)) return std::nullopt;

  c.model.dtype = parse_dtype(dtype);
  if (precision != "bf16" && precision != "fp8")
    throw UsageError(str("loom-train: model.precision='", precision, "': expected bf16 or fp8"));
  c.model.fp8 = precision == "fp8";
  c.model.checkpoint_auto = checkpoint == "auto";
  if (!c.model.checkpoint_auto) {
    size_t used = 0;
    try {
      c.model.checkpoint = std::stod(checkpoint, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != checkpoint.size() || checkpoint.empty())
      throw UsageError(str("loom-train: model.checkpoint='", checkpoint, "': expected a fraction in [0, 1] or auto"));
  }
  if (c.ckpt.folder.empty() && !c.job.run_dir.empty()) c.ckpt.folder = c.job.run_dir + "/checkpoints";
  LOOM_CHECK(c.data.total_steps >= 1, "data.total_steps must be >= 1, got ", c.data.total_steps);
  LOOM_CHECK(c.job.log_every >= 1, "job.log_every must be >= 1, got ", c.job.log_every);
  LOOM_CHECK(c.data.valid_every >= 0 && c.ckpt.checkpoint_every >= 0,
             "data.valid_every and ckpt.checkpoint_every must be >= 0");
  // Non-finite values pass the range checks below (inf >= 0) and train into NaN weights.
  for (const auto& [key, v] : std::initializer_list<std::pair<const char*, double>>{
           {"adam.lr", c.adam.lr}, {"adam.adam_beta1", c.adam.beta1}, {"adam.adam_beta2", c.adam.beta2},
           {"adam.adam_eps", c.adam.eps}, {"adam.weight_decay", c.adam.weight_decay},
           {"hybrid_zero_optimizer.clip_grad_norm", c.hybrid_zero_optimizer.clip_grad_norm},
           {"lr_scheduler.warmup_ratio", c.lr_scheduler.warmup_ratio}, {"lr_scheduler.eta_min", c.lr_scheduler.eta_min},
           {"loss.label_smoothing", c.loss.label_smoothing}})
    LOOM_CHECK(std::isfinite(v), key, " must be a finite number, got ", v);
  LOOM_CHECK(c.adam.lr >= 0, "adam.lr must be >= 0, got ", c.adam.lr);
  LOOM_CHECK(c.adam.beta1 >= 0 && c.adam.beta1 < 1, "adam.adam_beta1 must be in [0, 1), got ", c.adam.beta1);
  LOOM_CHECK(c.adam.beta2 >= 0 && c.adam.beta2 < 1, "adam.adam_beta2 must be in [0, 1), got ", c.adam.beta2);
  LOOM_CHECK(c.adam.eps > 0, "adam.adam_eps must be > 0, got ", c.adam.eps);
  LOOM_CHECK(c.adam.weight_decay >= 0, "adam.weight_decay must be >= 0, got ", c.adam.weight_decay);
  LOOM_CHECK(c.hybrid_zero_optimizer.clip_grad_norm >= 0, "hybrid_zero_optimizer.clip_grad_norm must be >= 0 (0 = off), got ",
             c.hybrid_zero_optimizer.clip_grad_norm);
  LOOM_CHECK(c.loss.label_smoothing >= 0 && c.loss.label_smoothing < 1, "loss.label_smoothing must be in [0, 1), got ",
             c.loss.label_smoothing);
  LOOM_CHECK(c.job.peak_tflops > 0, "job.peak_tflops must be > 0, got ", c.job.peak_tflops);
  parse_attention_kernel(c.job.attention);  // rejects unknown names now, not after the data is read
  LOOM_CHECK(c.flags.resume.empty() + c.flags.init_from.empty() + c.flags.init_from_hf.empty() >= 2,
             "--resume, --init-from and --init-from-hf exclude each other");
  c.model.validate();
  c.data.validate();
  c.parallel.validate();
  LOOM_CHECK(c.monitor.hang_timeout >= 0, "monitor.hang_timeout must be >= 0, got ", c.monitor.hang_timeout);
  LOOM_CHECK(c.monitor.spike.ratio == 0 || c.monitor.spike.ratio > 1, "monitor.spike_ratio must be 0 (off) or > 1, got ",
             c.monitor.spike.ratio);
  LOOM_CHECK(c.monitor.spike.window >= 1, "monitor.spike_window must be >= 1, got ", c.monitor.spike.window);
  LOOM_CHECK(c.monitor.diag_every >= 0, "monitor.diag_every must be >= 0, got ", c.monitor.diag_every);
  LOOM_CHECK(c.monitor.diag_outlier_ratio > 1, "monitor.diag_outlier_ratio must be > 1, got ",
             c.monitor.diag_outlier_ratio);
  LrSchedule check(c.lr_schedule_options());  // validates the lr_scheduler.* keys
  const std::string& on_resume = c.lr_scheduler.on_resume;
  LOOM_CHECK(on_resume == "refuse" || on_resume == "apply" || on_resume == "keep",
             "lr_scheduler.on_resume must be refuse, apply or keep, got '", on_resume, "'");
  LOOM_CHECK(c.data.valid_micro_num >= 0, "data.valid_micro_num must be >= 0 (0 = all), got ", c.data.valid_micro_num);
  c.resolved_ini = p.resolved_ini();
  c.changed_ini = p.changed_ini();
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
