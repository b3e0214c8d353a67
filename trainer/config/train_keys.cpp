// Every loom-train key, once: name, help, check, bound to its field. The defaults are the fields'
// member initializers (config.h and each section's struct), read when the key is declared.
#include "attention_select.h"
#include "config.h"
#include "loom/cli.h"
#include "loom/error.h"

namespace loom {

namespace {

// clang-format off
void declare_flags(OptionTable& t, FlagOptions& f) {
  t.add("resume", &f.resume, "auto (the checkpoint `latest` names in ckpt.save_ckpt_folder, walking back past "
        "damaged ones; all damaged is an error), auto-or-fresh (the same, but all damaged starts fresh), a step_N "
        "folder, or empty to start fresh");
  t.add("init-from", &f.init_from, "a step_N folder whose model weights start the run");
  t.add("init-from-hf", &f.init_from_hf, "a Hugging Face folder (export-hf's or transformers') whose weights start "
        "the run; its architecture must equal model.*");
  t.add_switch("profile-memory", &f.profile_memory, "CUDA: write run_dir/memory_profile.json (parameters, "
               "gradients, optimizer state, activations) after the second step");
  t.add_switch("profiling", &f.profiling, "record steps 2-4 with LibTorch's profiler (chrome trace in run_dir)");
}

void declare_job(OptionTable& t, JobOptions& j) {
  t.add("job.run_dir", &j.run_dir, "output folder: metrics.jsonl, tensorboard/, checkpoints/ (default "
        "runs/run_YYYYMMDD_HHMMSS from rank 0's launch time, UTC)");
  t.add("job.device", &j.device, "cpu, cuda or cuda:N");
  // parse_attention_kernel's own message lists the kernels; checked now, not after the data is read.
  t.add("job.attention", &j.attention, "attention kernel: auto, cudnn, flash, segments or masked").check =
      [&j] { parse_attention_kernel(j.attention); };
  t.add("job.seed", &j.seed, "seed of the model initialisation and dropout");
  t.add("job.threads", &j.threads, "torch intra-op threads (0 = LibTorch's default)", at_least(0));
  t.add("job.log_every", &j.log_every, "steps between metrics lines", at_least(1));
  // 0 is "auto": the loop resolves it from the device.
  t.add_text("job.peak_tflops", "peak dense bf16 TFLOP/s of one device for MFU; auto: from the GPU's name (none on CPU)",
             [&j] { return j.peak_tflops == 0 ? std::string("auto") : option_text(j.peak_tflops); },
             [&j](const std::string& s) {
               if (s == "auto") {
                 j.peak_tflops = 0;
               } else {
                 read_option("job.peak_tflops", s, &j.peak_tflops);
               }
             }).check = [&j] {
    LOOM_CHECK(j.peak_tflops >= 0, "job.peak_tflops must be > 0 or auto, got ", j.peak_tflops);
  };
  t.add("job.tensorboard", &j.tensorboard, "write tensorboard/ event files");
  t.add("job.overwrite", &j.overwrite, "a fresh run into a run_dir that holds an earlier run moves it to "
        "RUN_DIR.old-YYYYMMDD_HHMMSS (never deletes); false: such a run is refused");
  t.add("job.deterministic", &j.deterministic, "bitwise the same losses and weights on every run of one seed, data, "
        "world size and GPU model: deterministic kernels only (attention: flash, not cuDNN), at a cost in speed");
}

void declare_data(OptionTable& t, DataOptions& d) {  // checked by DataOptions::validate
  t.add("data.seq_len", &d.seq_len, "tokens per pack (T)");
  t.add("data.micro_bsz", &d.micro_bsz, "packs per micro-batch (B)");
  t.add("data.micro_num", &d.micro_num, "micro-batches per step (gradient accumulation)");
  t.add("data.global_batch_size", &d.global_batch_size, "packs per step over all ranks: > 0 sets data.micro_num = "
        "global_batch_size / (micro_bsz * world size) at launch (0 = off; Megatron's global-batch-size)");
  t.add("data.total_steps", &d.total_steps, "optimizer steps of the run");
  t.add("data.valid_every", &d.valid_every, "steps between validations (0 = at the end)");
  t.add("data.valid_micro_num", &d.valid_micro_num, "micro-batches per dataset and validation (0 = all; Megatron's "
        "eval-iters)", at_least(0));
  t.add("data.skip_batches", &d.skip_batches, "steps whose data is consumed without an update, \"a-b,c\"");
  t.add("data.train_folder", &d.train_folder, "folder of packed shards (sub-folders = named datasets)").required = true;
  t.add("data.valid_folder", &d.valid_folder, "folder of packed shards for validation");
  t.add("data.seed", &d.seed, "sampler seed");
  t.add("data.prefetch", &d.prefetch, "micro-batches built ahead by the loader thread");
  t.add("data.dataset_weights", &d.dataset_weights, "\"name:weight,...\" (unlisted = 1); what a weight means is "
        "data.mixture's");
  t.add("data.mixture", &d.mixture, "what a dataset weight means: scaled (a multiple of the dataset's own size per "
        "epoch) or proportional (its share of every batch, Megatron-LM's blend)", one_of({"scaled", "proportional"}));
  t.add("data.tokenizer", &d.tokenizer, "the SentencePiece .model the data was tokenized with: checked against the "
        "shards' fingerprint and copied into every checkpoint (export-hf and generate then need no --tokenizer)");
  t.add("data.verify_checksums", &d.verify_checksums, "read every shard fully at start: ids and xxh64 against its .meta");
}

// The keys whose text is not their field: model.checkpoint ("auto" or a fraction), dtype, precision.
void declare_model_conversions(OptionTable& t, ModelOptions& m) {
  t.add_text("model.checkpoint", "fraction of layers recomputed in backward, or auto: the smallest fraction whose "
             "memory plan fits the device with model.checkpoint_margin to spare",
             [&m] { return m.checkpoint_auto ? std::string("auto") : option_text(m.checkpoint); },
             [&m](const std::string& s) {
               m.checkpoint_auto = s == "auto";
               if (m.checkpoint_auto) return;
               try {
                 read_option("model.checkpoint", s, &m.checkpoint);
               } catch (const UsageError&) {
                 throw UsageError(str("model.checkpoint='", s, "': expected a fraction in [0, 1] or auto"));
               }
             });
  t.add_text("model.dtype", "float32, bfloat16 or float16", [&m] { return dtype_name(m.dtype); },
             [&m](const std::string& s) { m.dtype = parse_dtype(s); });
  t.add_text("model.precision", "bf16: matmuls in model.dtype; fp8: the layers' linears (wqkv, wo, w1, w2, w3) in "
             "FP8 on GPUs with FP8 tensor cores (model.dtype=bfloat16)",
             [&m] { return std::string(m.fp8 ? "fp8" : "bf16"); },
             [&m](const std::string& s) {
               if (s != "bf16" && s != "fp8") throw UsageError(str("model.precision='", s, "': expected bf16 or fp8"));
               m.fp8 = s == "fp8";
             });
}

void declare_model(OptionTable& t, ModelOptions& m) {  // checked by ModelOptions::validate
  t.add("model.hidden_size", &m.hidden_size, "C");
  t.add("model.num_layers", &m.num_layers, "layers");
  t.add("model.num_attention_heads", &m.num_attention_heads, "H");
  t.add("model.num_kv_attention_heads", &m.num_kv_attention_heads, "K (GQA; 0 = H)");
  t.add("model.mlp_ratio", &m.mlp_ratio, "F = 256*ceil(C*mlp_ratio/256)");
  t.add("model.vocab_size", &m.vocab_size, "V (>= the data's vocabulary)");
  t.add("model.layer_norm_epsilon", &m.norm_eps, "RMSNorm epsilon");
  t.add("model.qkv_bias", &m.qkv_bias, "bias on the fused QKV projection");
  t.add("model.out_bias", &m.out_bias, "bias on the attention output projection");
  t.add("model.tie_embeddings", &m.tie_embeddings, "head shares the embedding");
  t.add("model.init_std", &m.init_std, "normal init std");
  t.add("model.scaled_init", &m.scaled_init, "wo, w3 init std / sqrt(2*layers)");
  t.add("model.dropout", &m.dropout, "residual dropout");
  declare_model_conversions(t, m);
  t.add("model.checkpoint_margin", &m.checkpoint_margin, "model.checkpoint=auto: fraction of the device's memory "
        "the plan leaves free");
  t.add("model.rope_base", &m.rope_base, "rotary base");
}

void declare_optimizer(OptionTable& t, TrainConfig& c) {
  AdamOptions& a = c.adam;  // checked by AdamOptions::validate, as the optimizer checks it
  t.add("adam.lr", &a.lr, "peak learning rate");
  t.add("adam.adam_beta1", &a.beta1, "beta1");
  t.add("adam.adam_beta2", &a.beta2, "beta2");
  t.add("adam.adam_eps", &a.eps, "eps");
  t.add("adam.weight_decay", &a.weight_decay, "decoupled weight decay of matrices");
  t.add("adam.decay_embeddings", &a.decay_embeddings, "also decay embeddings");
  t.add("adam.overlap_update", &a.overlap_update, "CUDA, replicated optimizer: the update runs layer by layer "
        "beside the next step's forward (same weights, bitwise)");
  t.add("hybrid_zero_optimizer.clip_grad_norm", &c.hybrid_zero_optimizer.clip_grad_norm,
        "global-norm clip (0 = off)");  // checked by HybridZeroOptions::validate
  LrSchedulerOptions& s = c.lr_scheduler;  // checked by LrSchedule
  t.add("lr_scheduler.kind", &s.kind, "cosine, constant or wsd (warmup-stable-decay: the schedule to extend a run with)");
  t.add("lr_scheduler.decay_ratio", &s.decay_ratio, "wsd: the final linear decay to eta_min, a fraction of total_steps");
  t.add("lr_scheduler.on_resume", &s.on_resume, "a resume whose schedule keys differ from the checkpoint's: refuse, "
        "apply (this run's keys from this step) or keep (the checkpoint's)", one_of({"refuse", "apply", "keep"}));
  t.add("lr_scheduler.warmup_ratio", &s.warmup_ratio, "warmup = int(total_steps*ratio)");
  t.add("lr_scheduler.warmup_steps", &s.warmup_steps, "warmup updates, overriding warmup_ratio (-1 = use the ratio; "
        "Megatron's lr-warmup-iters)");
  t.add("lr_scheduler.init_steps", &s.init_steps, "updates at lr 0 before warmup");
  t.add("lr_scheduler.eta_min", &s.eta_min, "final learning rate");
  t.add("loss.label_smoothing", &c.loss.label_smoothing, "label smoothing", half_open(0, 1));
}

void declare_ckpt(OptionTable& t, CheckpointOptions& k) {
  t.add("ckpt.enable_save_ckpt", &k.enable_save, "write checkpoints");
  t.add("ckpt.checkpoint_every", &k.checkpoint_every, "steps between checkpoints (0 = at the end)", at_least(0));
  t.add("ckpt.save_ckpt_folder", &k.folder, "checkpoint folder (default run_dir/checkpoints)");
  t.add("ckpt.keep", &k.keep, "checkpoints kept (0 = all)", at_least(0));
  t.add("ckpt.stop_file", &k.stop_file, "InternLM's stop file: -N saves at step N, +N saves and quits at step N");
  t.add("ckpt.async_save", &k.async_save, "write checkpoints from a background thread (training blocks only for "
        "the copy)");
}

void declare_parallel(OptionTable& t, ParallelOptions& p) {  // checked by ParallelOptions::validate
  t.add("parallel.zero1", &p.zero1, "optimizer-state shards over the data-parallel ranks (1 = off, -1 = every "
        "rank; must divide the world size)");
  t.add("parallel.zero_stage", &p.zero_stage, "what parallel.zero1 shards: 1 optimizer state, 2 + gradients, "
        "3 + weights");
  t.add("parallel.bucket_mb", &p.bucket_mb, "gradient all-reduce bucket (MiB)");
  t.add("parallel.timeout_s", &p.timeout_s, "a collective waiting longer fails the job with a report");
  t.add("parallel.backend", &p.backend, "auto (nccl on CUDA, else gloo), gloo or nccl");
}

void declare_monitor(OptionTable& t, MonitorOptions& m) {
  t.add("monitor.alert_webhook", &m.alerts.webhook, "http:// URL that receives each alert as a JSON POST (\"\" = off)");
  t.add("monitor.alert_command", &m.alerts.command, "shell command run with each alert's JSON on stdin (\"\" = off)");
  // The alert keys are checked by AlertOptions::validate, as Alerts checks them.
  t.add("monitor.alert_timeout_s", &m.alerts.timeout_s, "bound of one delivery");
  t.add("monitor.hang_timeout", &m.hang_timeout, "seconds without a finished step before the watchdog reports "
        "every thread's phase and exits 4 (0 = off)", at_least(0));
  t.add("monitor.spike_ratio", &m.spike.ratio, "a loss above this x the median of the last spike_window losses is "
        "a spike (0 = off)", Check{[](double v) { return v == 0 || v > 1; }, "must be 0 (off) or > 1"});
  t.add("monitor.spike_window", &m.spike.window, "losses in the spike reference", at_least(1));
  t.add("monitor.skip_spike_batches", &m.spike.exclude_spikes, "skip the update of a spike step (its index is "
        "logged for data.skip_batches)");
  t.add("monitor.diag_every", &m.diag_every, "steps between per-rank step-time reports (0 = off)", at_least(0));
  t.add("monitor.diag_outlier_ratio", &m.diag_outlier_ratio, "a rank slower than this x the median is flagged",
        above(1));
  t.add("monitor.startup_probe", &m.startup_probe, "time a matmul (and an all-reduce) on every rank at start and "
        "flag slow ranks");
}

void declare_debug(OptionTable& t, DebugOptions& d) {
  t.add("debug.hang_at_step", &d.hang_at_step, "TEST ONLY: step N's forward never ends");
  t.add("debug.spike_at_step", &d.spike_at_step, "TEST ONLY: step N's loss looks 100x larger");
  t.add("debug.kill_at_step", &d.kill_at_step, "TEST ONLY: SIGKILL during step N");
  t.add("debug.kill_at_layer", &d.kill_at_layer, "TEST ONLY: with debug.kill_at_step, SIGKILL before layer L's "
        "forward (mid-step, between a ZeRO-3 gather and the next)");
  t.add("debug.kill_in_save", &d.kill_in_save, "TEST ONLY: SIGKILL inside the save of step N (after its model file)");
  t.add("debug.fail_save_at_step", &d.fail_save_at_step, "TEST ONLY: this rank's part of the save of step N fails "
        "(as a full disk would); give it to one rank");
  t.add("debug.inject_nan_step", &d.inject_nan_step, "TEST ONLY: make step N's gradients NaN");
  t.add("debug.stop_at_step", &d.stop_at_step, "TEST ONLY: stop as on SIGTERM once N steps are done");
  t.add("debug.pause_at_step", &d.pause_at_step, "TEST ONLY: once N steps are done, wait for SIGTERM or SIGINT");
}
// clang-format on

}  // namespace

OptionTable train_options(TrainConfig& c) {
  OptionTable t;
  declare_flags(t, c.flags);
  declare_job(t, c.job);
  declare_data(t, c.data);
  declare_model(t, c.model);
  declare_optimizer(t, c);
  declare_ckpt(t, c.ckpt);
  declare_parallel(t, c.parallel);
  declare_monitor(t, c.monitor);
  declare_debug(t, c.debug);
  return t;
}

}  // namespace loom
