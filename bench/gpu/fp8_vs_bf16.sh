#!/usr/bin/env bash
# model.precision=fp8 against bf16 on one GPU, side by side in one call, same data and seed
# (bench/gpu/loom_train.sh): the 1b preset (micro_bsz 4, no recompute) and the 7b preset
# (micro_bsz 1, model.checkpoint=auto). Prints each run's JSON line and the fp8/bf16 tokens/s
# ratio per preset. MFU keeps the bf16 convention (989 TFLOP/s peak), so FP8 figures are "as if
# bf16": an FP8 run may read above what bf16 could reach.
# Run on the GPU machine after scripts/device/build.sh. Usage: bench/gpu/fp8_vs_bf16.sh OUT_DIR [PRESETS]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: bench/gpu/fp8_vs_bf16.sh OUT_DIR [PRESETS]}
PRESETS=${2:-1b 7b}
mkdir -p "$OUT"
export LOOM_BENCH_STEPS=${LOOM_BENCH_STEPS:-10}
for preset in $PRESETS; do
  case "$preset" in
    1b) bsz=4 ckpt=0 ;;
    7b) bsz=1 ckpt=auto ;;
  esac
  for precision in bf16 fp8; do
    LOOM_TRAIN_EXTRA="--model.precision=$precision ${LOOM_TRAIN_EXTRA:-}" timeout 200 \
      bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$OUT" > "$OUT/${preset}_${precision}.json" \
      || echo "{\"failed\": \"$preset $precision\"}" > "$OUT/${preset}_${precision}.json"
    cp "$OUT/loom_${preset}.log" "$OUT/loom_${preset}_${precision}.log" 2>/dev/null
    echo "$preset $precision: $(cat "$OUT/${preset}_${precision}.json")"
  done
  python3 - "$OUT/${preset}_bf16.json" "$OUT/${preset}_fp8.json" "$preset" <<'PY'
import json, sys
try:
    b, f = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
    print(f"{sys.argv[3]}: fp8 {f['tokens_per_s']} / bf16 {b['tokens_per_s']} tokens/s = "
          f"{f['tokens_per_s'] / b['tokens_per_s']:.3f}x; final loss bf16 {b['final_loss']} fp8 {f['final_loss']}; "
          f"peak GiB bf16 {b['peak_allocated_gib']} fp8 {f['peak_allocated_gib']}")
except Exception as e:
    print(f"{sys.argv[3]}: no ratio ({e})")
PY
done
