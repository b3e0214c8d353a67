#!/usr/bin/env bash
# On the GPU: `loom-train plan --json` and a 3-step run of the same preset name the same attention
# kernel, and the plan's total is set beside the run's measured peak. One line per preset:
#   plan == run: PRESET attention=KEY plan_total_gib=X peak_reserved_gib=Y
# or a mismatch line (exit 1). Data: bench/gpu/make_packed.py.
# Usage: bash bench/gpu/plan_vs_run.sh OUT_DIR [PRESET...]   (presets: 1b 7b; default 1b)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: bench/gpu/plan_vs_run.sh OUT_DIR [PRESET...]}
shift
BIN=build-gpu/trainer/loom-train
W=$(mktemp -d /tmp/loom-planrun-XXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/train/synthetic"
python3 bench/gpu/make_packed.py "$W/train/synthetic/part0.bin" --seq-len 4096 --packs 16 >&2
rc=0
for preset in "${@:-1b}"; do
  case "$preset" in
    1b) shape=(--model.hidden_size=2048 --model.num_layers=24 --model.num_attention_heads=16 --data.micro_bsz=2) ;;
    7b) shape=(--model.hidden_size=4096 --model.num_layers=32 --model.num_attention_heads=32 --data.micro_bsz=1
               --model.checkpoint=auto) ;;
    *) echo "unknown preset $preset" >&2; exit 2 ;;
  esac
  args=(--job.device=cuda --model.dtype=bfloat16 --job.tensorboard=false --ckpt.enable_save_ckpt=false
        --data.train_folder="$W/train" --data.seq_len=4096 --data.total_steps=3 --model.vocab_size=103168 "${shape[@]}")
  $BIN plan --json "${args[@]}" > "$W/plan_$preset.json" 2> "$OUT/plan_vs_run_$preset.log"
  $BIN --job.run_dir="$W/run_$preset" "${args[@]}" >> "$OUT/plan_vs_run_$preset.log" 2>&1
  python3 - "$preset" "$W/plan_$preset.json" "$OUT/plan_vs_run_$preset.log" "$W/run_$preset/metrics.jsonl" <<'PY' || rc=1
import json, re, sys
preset, plan_path, log_path, metrics = sys.argv[1:]
plan = json.load(open(plan_path))
log = open(log_path, errors="replace").read()
m = re.search(r"INFO attention: ([a-z+]+): ", log)
run = m.group(1) if m else None
rows = [json.loads(l) for l in open(metrics) if '"step"' in l] if run else []
peak = max((r.get("peak_reserved_mb", 0) for r in rows), default=0) / 1024
verdict = "plan == run" if run == plan["attention"] else "MISMATCH plan != run"
print(f"{verdict}: {preset} attention plan={plan['attention']} run={run} ({plan['attention_source']}) "
      f"plan_total_gib={plan['per_rank_bytes']['total'] / 2**30:.2f} peak_reserved_gib={peak:.2f}")
sys.exit(0 if run == plan["attention"] else 1)
PY
done
exit $rc
