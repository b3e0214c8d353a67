#!/usr/bin/python3
"""An InternLM Python config (configs/7B_sft.py and the like) as a loom-train INI file.

usage: scripts/internlm_config.py CONFIG.py > run.ini

The config is executed the way InternLM's Config.from_file does (the file runs as a Python module;
its module-level names that do not start with '_' and are not modules, functions or classes are the
config), so computed values (MLP_RATIO = 8 / 3, data["total_steps"], 512 * 1024 * 1024) come out
as InternLM sees them. Every key loom-train has is written to stdout as INI (docs/TRAIN.md); every
key it cannot map is listed with the reason, as comments at the end of the INI and on stderr.
Command-line switches that have no INI key (ckpt.auto_resume -> --resume auto, load_ckpt_info ->
--init-from) are suggested the same way. Exit code 0, or 2 when CONFIG.py cannot be read or run.
"""
import runpy
import sys
import types


def load(path):
    """InternLM's Config.from_file: run the file, keep its public non-module names."""
    namespace = runpy.run_path(path, run_name="__internlm_config__")
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and not isinstance(v, (types.ModuleType, types.FunctionType, type))}


def ini_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)  # the shortest text that reads back as the same double (loom prints the same)
    return str(v)


class Mapper:
    def __init__(self, config):
        self.config = config
        self.sections = {}   # section -> [(key, value, note)]
        self.unmapped = []   # "name = value: why"
        self.switches = []   # command-line switches to add, with why

    def set(self, section, key, value, note=""):
        self.sections.setdefault(section, []).append((key, ini_value(value), note))

    def skip(self, name, value, why):
        self.unmapped.append(f"{name} = {value!r}: {why}")

    def section(self, name):
        d = self.config.get(name, {})
        if not isinstance(d, dict):
            self.skip(name, d, "expected a dict")
            return {}
        return dict(d)

    def run(self):
        c = self.config
        self.map_job(c)
        self.map_data(self.section("data"))
        self.map_model(self.section("model"))
        self.map_adam(self.section("adam"))
        self.map_hybrid_zero(self.section("hybrid_zero_optimizer"))
        self.map_lr_scheduler(self.section("lr_scheduler"))
        self.map_beta2(self.section("beta2_scheduler"))
        self.map_loss(self.section("loss"))
        self.map_ckpt(self.section("ckpt"))
        self.map_parallel(self.section("parallel"))
        self.map_grad_scaler(c.get("grad_scaler"))
        self.map_monitor(self.section("monitor"))
        known = {"JOB_NAME", "DO_ALERT", "data", "model", "adam", "hybrid_zero_optimizer", "lr_scheduler",
                 "beta2_scheduler", "loss", "ckpt", "parallel", "grad_scaler", "monitor"}
        for name, value in c.items():
            if name in known or name.isupper():
                continue  # UPPER_CASE names are the file's own constants, used through the dicts above
            if name in ("cudnn_deterministic", "cudnn_benchmark"):
                self.skip(name, value, "loom does not use cuDNN")
            else:
                self.skip(name, value, "no loom-train key")

    def map_job(self, c):
        if "JOB_NAME" in c:
            self.set("job", "run_dir", f"runs/{c['JOB_NAME']}", "from JOB_NAME")

    def map_data(self, d):
        for key in ("seq_len", "micro_num", "micro_bsz", "total_steps"):
            if key in d:
                self.set("data", key, d.pop(key))
        if "valid_every" in d:
            v = d.pop("valid_every")
            self.set("data", "valid_every", v, "InternLM's 0 disables validation; loom's 0 validates at the end, "
                     "and no data.valid_folder disables it" if v == 0 else "")
        skip = d.pop("skip_batches", "")
        if skip:
            self.set("data", "skip_batches", skip)
        for key in ("train_folder", "valid_folder"):
            if key in d:
                self.set("data", key, d.pop(key))
        if "diag_outlier_ratio" in d:
            self.set("monitor", "diag_outlier_ratio", d.pop("diag_outlier_ratio"), "from data.diag_outlier_ratio")
        if "empty_cache_and_diag_interval" in d:
            self.set("monitor", "diag_every", d.pop("empty_cache_and_diag_interval"),
                     "from data.empty_cache_and_diag_interval (the diagnosis part; loom empties no cache)")
        if d.get("rampup_batch_size", "") in ("", None):
            d.pop("rampup_batch_size", None)
        if "valid_micro_num" in d:
            # The micro-batches one validation reads per set: without the cap loom validates every
            # packed sequence of data.valid_folder, which can outlast the training between validations.
            self.set("data", "valid_micro_num", d.pop("valid_micro_num"))
        if "pack_sample_into_one" in d:
            v = d.pop("pack_sample_into_one")
            self.skip("data.pack_sample_into_one", v, "loom packs with loom-pack pack and always keeps document "
                      "boundaries in attention" + (" (True: InternLM attends across documents)" if v else ""))
        if "min_length" in d:
            self.skip("data.min_length", d.pop("min_length"), "loom does not drop short datasets; leave them out "
                      "of data.train_folder or weigh them with data.dataset_weights")
        for key, value in d.items():
            self.skip(f"data.{key}", value, "no loom-train key")

    def map_model(self, m):
        for key in ("hidden_size", "num_layers", "num_attention_heads", "vocab_size", "mlp_ratio", "layer_norm_epsilon"):
            if key in m:
                self.set("model", key, m.pop(key))
        if "num_kv_attention_heads" in m:
            self.set("model", "num_kv_attention_heads", m.pop("num_kv_attention_heads"))
        if "checkpoint" in m:
            v = m.pop("checkpoint")
            self.set("model", "checkpoint", 1 if v is True else 0 if v is False else v)
        if "dtype" in m:
            v = str(m.pop("dtype"))
            dtypes = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.half": "float16",
                      "torch.float32": "float32", "torch.float": "float32"}
            if v in dtypes:
                self.set("model", "dtype", dtypes[v])
            elif v == "torch.tf32":
                self.set("model", "dtype", "float32", "torch.tf32: float32 weights; loom-train does not switch TF32 matmuls")
            else:
                self.skip("model.dtype", v, "expected torch.bfloat16, torch.float16/half, torch.float32 or torch.tf32")
        norm = m.pop("norm_type", "rmsnorm")
        if norm != "rmsnorm":
            self.skip("model.norm_type", norm, "loom's model uses RMSNorm only")
        if m.pop("apply_post_layer_norm", False):
            self.skip("model.apply_post_layer_norm", True, "loom's model is pre-norm only")
        if "use_flash_attn" in m:
            v = m.pop("use_flash_attn")
            if not v:
                self.set("job", "attention", "masked", "from model.use_flash_attn = False")
            # True: loom's job.attention = auto already takes flash attention where it runs (CUDA).
        chunks = m.pop("num_chunks", 1)
        if chunks != 1:
            self.skip("model.num_chunks", chunks, "interleaved pipeline stages; loom has no pipeline parallelism")
        for key, why in (("embed_split_hidden", "how tensor parallelism splits the embedding; loom has no tensor parallelism"),
                         ("parallel_output", "tensor-parallel output gathering; loom has no tensor parallelism"),
                         ("embed_grad_scale", "loom does not scale the embedding's gradient")):
            if key in m:
                v = m.pop(key)
                if key == "embed_grad_scale" and v == 1:
                    continue  # 1 = no scaling, loom's behaviour
                if key in ("embed_split_hidden", "parallel_output"):
                    continue  # no effect without tensor parallelism (parallel.tensor is checked below)
                self.skip(f"model.{key}", v, why)
        for key, value in m.items():
            self.skip(f"model.{key}", value, "no loom-train key")

    def map_adam(self, a):
        for key in ("lr", "adam_beta1", "adam_beta2", "adam_eps", "weight_decay"):
            if key in a:
                self.set("adam", key, a.pop(key))
        c = a.pop("adam_beta2_c", 0)
        if c:
            self.skip("adam.adam_beta2_c", c, "loom keeps beta2 constant (no beta2 schedule)")
        for key, value in a.items():
            self.skip(f"adam.{key}", value, "no loom-train key")

    def map_hybrid_zero(self, h):
        if "clip_grad_norm" in h:
            self.set("hybrid_zero_optimizer", "clip_grad_norm", h.pop("clip_grad_norm"))
        if "reduce_bucket_size" in h:
            v = h.pop("reduce_bucket_size")
            self.set("parallel", "bucket_mb", v / (1 << 20), "from hybrid_zero_optimizer.reduce_bucket_size (bytes)")
        for key in ("overlap_sync_grad", "overlap_sync_param"):
            if key in h:
                v = h.pop(key)
                if v:
                    continue  # loom overlaps the gradient all-reduce with backward already
                self.skip(f"hybrid_zero_optimizer.{key}", v, "loom always overlaps communication; it cannot be turned off")
        for key, value in h.items():
            self.skip(f"hybrid_zero_optimizer.{key}", value, "no loom-train key")

    def map_lr_scheduler(self, s):
        total = s.pop("total_steps", None)
        data_total = self.config.get("data", {}).get("total_steps")
        if total is not None and total != data_total:
            self.skip("lr_scheduler.total_steps", total, f"loom's schedule runs over data.total_steps ({data_total})")
        for key in ("init_steps", "warmup_ratio", "eta_min"):
            if key in s:
                self.set("lr_scheduler", key, s.pop(key))
        last = s.pop("last_epoch", -1)
        if last != -1:
            self.skip("lr_scheduler.last_epoch", last, "loom resumes the schedule from the checkpoint's step (--resume)")
        for key, value in s.items():
            self.skip(f"lr_scheduler.{key}", value, "no loom-train key")

    def map_beta2(self, b):
        c = b.get("c", 0)
        if c:
            self.skip("beta2_scheduler", b, "loom keeps beta2 constant (no beta2 schedule)")
        # c = 0 (InternLM's configs): beta2 stays init_beta2 = adam.adam_beta2, as in loom.

    def map_loss(self, l):
        if "label_smoothing" in l:
            self.set("loss", "label_smoothing", l.pop("label_smoothing"))
        for key, value in l.items():
            self.skip(f"loss.{key}", value, "no loom-train key")

    def folder(self, name, value):
        """'local:PATH' -> PATH; other InternLM storage schemes cannot be mapped."""
        v = str(value)
        if v.startswith("local:"):
            return v[len("local:"):]
        if ":" in v.split("/")[0]:
            self.skip(name, value, "loom reads and writes local folders only (boto3:/volc: storage is not supported)")
            return None
        return v

    def map_ckpt(self, k):
        if "enable_save_ckpt" in k:
            self.set("ckpt", "enable_save_ckpt", k.pop("enable_save_ckpt"))
        if "save_ckpt_folder" in k:
            f = self.folder("ckpt.save_ckpt_folder", k.pop("save_ckpt_folder"))
            if f is not None:
                self.set("ckpt", "save_ckpt_folder", f)
        if "checkpoint_every" in k:
            self.set("ckpt", "checkpoint_every", k.pop("checkpoint_every"))
        if "stop_file_path" in k:
            f = self.folder("ckpt.stop_file_path", k.pop("stop_file_path"))
            if f is not None:
                self.set("ckpt", "stop_file", f)
        auto = k.pop("auto_resume", True)  # InternLM's default is True
        load = k.pop("load_ckpt_folder", None)
        info = k.pop("load_ckpt_info", None)
        if auto:
            self.switches.append("--resume auto   (ckpt.auto_resume: the latest checkpoint of ckpt.save_ckpt_folder; "
                                 "use auto-or-fresh to also start fresh when there is none)")
        if load:
            f = self.folder("ckpt.load_ckpt_folder", load)
            if f is not None:
                self.skip("ckpt.load_ckpt_folder", load, f"loom resumes from a checkpoint folder with "
                          f"--resume {f.rstrip('/')}/step_N (a command-line switch, not an INI key)"
                          + ("; ignored by InternLM too while auto_resume is True" if auto else ""))
        if info:
            path = info.get("path") if isinstance(info, dict) else info
            content = info.get("content", ("all",)) if isinstance(info, dict) else ("all",)
            kind = info.get("ckpt_type", "internlm") if isinstance(info, dict) else "internlm"
            why = ("loom reads its own checkpoints and Hugging Face folders: --init-from DIR/step_N (model weights) "
                   "or --init-from-hf DIR; an InternLM checkpoint folder (ckpt_type " + repr(kind) + ") is not read")
            if auto:
                why += "; ignored by InternLM too while auto_resume is True"
            self.skip("ckpt.load_ckpt_info", {"path": path, "content": tuple(content), "ckpt_type": kind}, why)
        for key in ("async_upload", "async_upload_tmp_folder", "oss_snapshot_freq"):
            if key in k:
                self.skip(f"ckpt.{key}", k.pop(key), "object-storage (boto3) uploads; loom writes local folders "
                          "(ckpt.async_save writes them from a background thread)")
        for key, value in k.items():
            self.skip(f"ckpt.{key}", value, "no loom-train key")

    def map_parallel(self, p):
        z = p.pop("zero1", None)
        if isinstance(z, dict):
            fsdp = z.get("fsdp", False)
            if fsdp:
                self.skip("parallel.zero1.fsdp", fsdp, "loom shards optimizer state (ZeRO-1), not parameters")
            z = z.get("size", -1)
        if z is not None:
            self.set("parallel", "zero1", -1 if z <= 0 else z, "InternLM's <= 0 (the whole data-parallel group) is loom's -1"
                     if z <= 0 else "")
        for key in ("tensor", "pipeline"):
            v = p.pop(key, 1)
            size = v.get("size", 1) if isinstance(v, dict) else v
            if size != 1:
                self.skip(f"parallel.{key}", v, f"loom has data parallelism only; a {key}-parallel size of {size} "
                          f"becomes more data-parallel ranks (set the global batch with data.micro_bsz/micro_num)")
        sp = p.pop("sequence_parallel", False)
        if sp:
            self.skip("parallel.sequence_parallel", sp, "loom has no tensor/sequence parallelism")
        for key, value in p.items():
            self.skip(f"parallel.{key}", value, "no loom-train key")

    def map_grad_scaler(self, g):
        if not g:
            return
        dtype = str(self.config.get("model", {}).get("dtype", ""))
        why = ("fp16 loss scaling; loom-train has no loss-scaler settings"
               + (" (not used: this config trains in " + dtype + ")" if dtype not in ("torch.float16", "torch.half") else ""))
        self.skip("grad_scaler", g, why)

    def map_monitor(self, m):
        alert = m.pop("alert", {})
        if isinstance(alert, dict) and alert.get("enable_feishu_alert"):
            self.skip("monitor.alert.feishu_alert_address", alert.get("feishu_alert_address"),
                      "loom posts its own JSON to monitor.alert_webhook (docs/MONITOR.md); a Feishu bot needs a relay")
        for key, value in m.items():
            self.skip(f"monitor.{key}", value, "no loom-train key")

    def ini(self, source):
        out = [f"# loom-train configuration from {source}, by scripts/internlm_config.py.",
               "# Give the data: --data.train_folder=DIR (packed shards, loom-pack pack), and --data.valid_folder=DIR."]
        order = ["job", "data", "model", "adam", "hybrid_zero_optimizer", "lr_scheduler", "loss", "ckpt", "parallel",
                 "monitor"]
        for section in order + sorted(set(self.sections) - set(order)):
            if section not in self.sections:
                continue
            out.append(f"\n[{section}]")
            for key, value, note in self.sections[section]:
                out.append(f"{key} = {value}" + (f"  # {note}" if note else ""))
        if self.switches:
            out.append("\n# Command-line switches this config asks for:")
            out += [f"#   {s}" for s in self.switches]
        if self.unmapped:
            out.append(f"\n# Not mapped ({len(self.unmapped)}):")
            out += [f"#   {u}" for u in self.unmapped]
        return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        sys.stderr.write(__doc__)
        return 0 if len(argv) == 2 else 2
    try:
        config = load(argv[1])
    except Exception as e:  # the user's file: any error in it is theirs to fix
        sys.stderr.write(f"internlm_config.py: {argv[1]}: cannot run the config: {type(e).__name__}: {e}\n")
        return 2
    m = Mapper(config)
    m.run()
    sys.stdout.write(m.ini(argv[1]))
    for s in m.switches:
        sys.stderr.write(f"internlm_config.py: add {s}\n")
    for u in m.unmapped:
        sys.stderr.write(f"internlm_config.py: not mapped: {u}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
