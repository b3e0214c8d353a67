#!/usr/bin/env bash
# The GPU speed targets in one call, beside the peer: loom's 1b (micro_bsz 4, no recompute) and 7b
# (micro_bsz 1, model.checkpoint=auto) presets in bf16 and fp8 (bench/gpu/fp8_vs_bf16.sh), then HF
# transformers compiled on the 1b shape and micro-batch (bench/gpu/hf_llama.py). Prints one line per
# target (1b bf16 >= 60% MFU, 7b bf16 >= 52%, fp8/bf16 >= 1.3x on 7b and >= 1.2x on 1b) with the
# figures, and loom's 1b bf16 tokens/s over the peer's. Run on the GPU machine after
# scripts/device/build.sh. Usage: bash bench/gpu/targets.sh OUT_DIR   (LOOM_BENCH_STEPS, default 20)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bench/gpu/targets.sh OUT_DIR}
mkdir -p "$OUT"
LOOM_BENCH_STEPS=${LOOM_BENCH_STEPS:-20} bash bench/gpu/fp8_vs_bf16.sh "$OUT" "1b 7b"
timeout 300 python3 bench/gpu/hf_llama.py --preset 1b --mode compile --micro-bsz 4 --steps 12 --warmup 3 \
  > "$OUT/hf_1b.json" 2> "$OUT/hf_1b.err" || echo "{\"failed\": \"hf 1b\"}" > "$OUT/hf_1b.json"
python3 - "$OUT" <<'PY'
import json, os, sys

def last(name):
    try:
        return json.loads(open(os.path.join(sys.argv[1], name)).read().strip().splitlines()[-1])
    except Exception:
        return {}

r = {k: last(f"{k}.json") for k in ("1b_bf16", "1b_fp8", "7b_bf16", "7b_fp8", "hf_1b")}
tok = lambda k: r[k].get("tokens_per_s")
mfu = lambda k: r[k].get("mfu")

def line(name, value, goal, shown):
    verdict = "missing" if value is None else ("met" if value >= goal else "not met")
    print(f"target {name}: {shown} (goal >= {goal}): {verdict}")

line("1b bf16 MFU", mfu("1b_bf16"), 0.60, f"{mfu('1b_bf16')} ({tok('1b_bf16')} tokens/s)")
line("7b bf16 MFU", mfu("7b_bf16"), 0.52, f"{mfu('7b_bf16')} ({tok('7b_bf16')} tokens/s)")
for p, goal in (("7b", 1.3), ("1b", 1.2)):
    b, f = tok(f"{p}_bf16"), tok(f"{p}_fp8")
    ratio = round(f / b, 3) if b and f else None
    line(f"{p} fp8/bf16", ratio, goal, f"{ratio} ({f} / {b} tokens/s)")
if tok("1b_bf16") and tok("hf_1b"):
    print(f"peer: loom 1b bf16 {tok('1b_bf16')} / HF compiled {tok('hf_1b')} tokens/s = "
          f"{tok('1b_bf16') / tok('hf_1b'):.3f}x (HF MFU {mfu('hf_1b')})")
else:
    print("peer: missing (see hf_1b.err)")
PY
