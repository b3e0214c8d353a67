"""scripts/internlm_config.py on InternLM's own 7B and 20B configs (tests/data/internlm_configs):
the INI it writes has InternLM's values under loom's keys, loom-train's parser accepts it
(`loom-train plan`, whose parameter count must equal the InternLM architecture's, computed here
independently), and every key it cannot map is listed with a reason.

usage: internlm_config_test.py SOURCE_DIR LOOM_TRAIN_BIN
"""
import configparser
import os
import subprocess
import sys
import tempfile
import json
import math

SRC, LOOM_TRAIN = sys.argv[1], sys.argv[2]
SCRIPT = os.path.join(SRC, "scripts/internlm_config.py")
CONFIGS = os.path.join(SRC, "tests/data/internlm_configs")


def convert(name):
    r = subprocess.run([sys.executable, SCRIPT, os.path.join(CONFIGS, name)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def values(ini_text):
    p = configparser.ConfigParser(inline_comment_prefixes=("#",))
    p.read_string(ini_text)
    return {f"{s}.{k}": v for s in p.sections() for k, v in p[s].items()}


def internlm_parameters(C, L, H, V, mlp_ratio):
    """InternLM's architecture: untied embedding and head, per layer fused QKV with bias, output with
    bias, SwiGLU w1/w2/w3 without bias (F = 256 * ceil(C * mlp_ratio / 256)), two RMSNorms; a final norm."""
    F = 256 * math.ceil(C * mlp_ratio / 256)
    per_layer = (3 * C * C + 3 * C) + (C * C + C) + 3 * C * F + 2 * C
    return 2 * V * C + L * per_layer + C


def plan(ini_text, world):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "run.ini")
        with open(path, "w") as f:
            f.write(ini_text)
        r = subprocess.run([LOOM_TRAIN, "plan", "--config", path, "--world-size", str(world),
                            "--device-memory-gib", "1000000", "--json"], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])


EXPECTED = {
    "7B_sft.py": {
        "job.run_dir": "runs/7b_train", "data.seq_len": "2048", "data.micro_num": "4", "data.micro_bsz": "2",
        "data.total_steps": "50000", "data.valid_every": "50", "data.valid_micro_num": "4",
        "model.hidden_size": "4096", "model.num_layers": "32",
        "model.num_attention_heads": "32", "model.vocab_size": "103168", "model.mlp_ratio": "2.6666666666666665",
        "model.layer_norm_epsilon": "1e-05", "model.checkpoint": "0", "model.dtype": "bfloat16", "adam.lr": "0.0001",
        "adam.adam_beta1": "0.9", "adam.adam_beta2": "0.95", "adam.adam_eps": "1e-08", "adam.weight_decay": "0.01",
        "hybrid_zero_optimizer.clip_grad_norm": "1.0", "lr_scheduler.init_steps": "0",
        "lr_scheduler.warmup_ratio": "0.01", "lr_scheduler.eta_min": "1e-05", "loss.label_smoothing": "0",
        "ckpt.enable_save_ckpt": "false", "ckpt.save_ckpt_folder": "llm_ckpts", "ckpt.checkpoint_every": "50",
        "parallel.zero1": "8", "parallel.bucket_mb": "512.0", "monitor.diag_outlier_ratio": "1.1",
        "monitor.diag_every": "10",
    },
}
EXPECTED["20B_sft.py"] = dict(EXPECTED["7B_sft.py"], **{
    "job.run_dir": "runs/13b_train", "data.seq_len": "4096", "data.micro_bsz": "4", "data.total_steps": "20",
    "model.hidden_size": "5120", "model.num_layers": "60", "model.num_attention_heads": "40", "parallel.zero1": "-1"})

UNMAPPED = {  # the keys each config must list as not mapped (the start of each line)
    "7B_sft.py": ["data.pack_sample_into_one = False", "data.min_length = 50",
                  "ckpt.load_ckpt_folder = 'local:llm_ckpts/'", "ckpt.load_ckpt_info = ", "ckpt.async_upload = True",
                  "ckpt.async_upload_tmp_folder = ", "ckpt.oss_snapshot_freq = 25", "grad_scaler = ",
                  "cudnn_deterministic = False", "cudnn_benchmark = False"],
}
UNMAPPED["20B_sft.py"] = UNMAPPED["7B_sft.py"] + [
    "parallel.tensor = {'size': 8, 'mode': 'fstp'}: loom has data parallelism only",
    "parallel.sequence_parallel = True"]

failures = 0
for name, want in EXPECTED.items():
    ini, err = convert(name)
    got = values(ini)
    for key, value in want.items():
        if got.get(key) != value:
            print(f"FAIL {name}: {key} = {got.get(key)!r}, expected {value!r}")
            failures += 1
    extra = set(got) - set(want)
    if extra:
        print(f"FAIL {name}: unexpected keys {sorted(extra)}")
        failures += 1
    # Each unmapped key is listed in the INI (comment) and on stderr, with a reason after ': '.
    listed = [l[len("#   "):] for l in ini.splitlines() if l.startswith("#   ") and not l.startswith("#   --")]
    stderr_listed = [l[len("internlm_config.py: not mapped: "):] for l in err.splitlines()
                     if l.startswith("internlm_config.py: not mapped: ")]
    if listed != stderr_listed:
        print(f"FAIL {name}: the INI and stderr list different unmapped keys:\n{listed}\n{stderr_listed}")
        failures += 1
    for start in UNMAPPED[name]:
        if not any(l.startswith(start) and ": " in l for l in listed):
            print(f"FAIL {name}: '{start}...' is not listed as unmapped with a reason")
            failures += 1
    if len(listed) != len(UNMAPPED[name]):
        print(f"FAIL {name}: {len(listed)} unmapped keys listed, expected {len(UNMAPPED[name])}: {listed}")
        failures += 1
    # ckpt.auto_resume is True in 20B and by InternLM's default in 7B: both ask for --resume auto.
    if "#   --resume auto" not in ini or "internlm_config.py: add --resume auto" not in err:
        print(f"FAIL {name}: --resume auto is not suggested")
        failures += 1
    # loom-train's parser accepts the file and builds InternLM's architecture from it.
    p = plan(ini, 8)
    C, L, H = int(want["model.hidden_size"]), int(want["model.num_layers"]), int(want["model.num_attention_heads"])
    expected_params = internlm_parameters(C, L, H, 103168, 8 / 3)
    if p["num_parameters"] != expected_params or p["dtype"] != "bfloat16" or p["seq_len"] != int(want["data.seq_len"]):
        print(f"FAIL {name}: plan says {p['num_parameters']} parameters, {p['dtype']}, seq_len {p['seq_len']}; "
              f"expected {expected_params}, bfloat16, {want['data.seq_len']}")
        failures += 1
    print(f"{name}: {len(got)} keys, {len(listed)} unmapped, {p['num_parameters']} parameters")

# InternLM-7B is a 7.32B model: the formula above is the architecture's, not loom's.
assert internlm_parameters(4096, 32, 32, 103168, 8 / 3) == 7321948160

# A config that does not run is an error naming the file.
with tempfile.TemporaryDirectory() as d:
    bad = os.path.join(d, "bad.py")
    with open(bad, "w") as f:
        f.write("SEQ_LEN = 2048\ndata = dict(seq_len=SEQ_LENN)\n")
    r = subprocess.run([sys.executable, SCRIPT, bad], capture_output=True, text=True)
    if r.returncode != 2 or bad not in r.stderr or "NameError" not in r.stderr:
        print(f"FAIL bad config: rc {r.returncode}, {r.stderr!r}")
        failures += 1

print("OK" if failures == 0 else f"{failures} failures")
sys.exit(1 if failures else 0)
