#!/usr/bin/env bash
# One device call (<= 600 s): where a step's time goes against what each part could take at best,
# and the pipeline's CPU stages on the machine's 16 cores. Build loom-train, loom-tokenize and
# loom-pack; then for PRESETS (LOOM_CEIL_PRESETS, default "1b 7b"; the 7b needs an H200) on
# one-document packs an unprofiled run (its wall step time) and a profiled one (--profiling, summed by
# bench/gpu/trace_summary.py), and bench/gpu/step_ceilings.py on them; the 7b also on random
# packs, profiled (two documents a pack: where per-document attention loses against one). Last,
# with what time is left, bench/short_docs_bench.sh on all cores (spm_encode from the carried
# sentencepiece .deb). Logs in $OUT/logs.tgz, the summary on stdout and in $OUT/summary.txt.
# Usage (device tool, carry [".debs"]): bash bench/gpu/ceilings_call.sh   (LOOM_CALL_S, default 570)
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/call_env.sh
build_for_call loom-train loom-tokenize loom-pack
for preset in ${LOOM_CEIL_PRESETS:-1b 7b}; do
  case "$preset" in 1b) bsz=4 ckpt=0 ;; 7b) bsz=1 ckpt=auto ;; *) echo "unknown preset $preset" | tee -a "$L/device.txt"; continue ;; esac
  LOOM_BENCH_DOCS=one LOOM_BENCH_STEPS=12 LOOM_BENCH_TAG=${preset}_one timeout 150 \
    bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$L" > "$L/${preset}_one.json" 2> "$L/${preset}_one.err"
  echo "$preset one: $(tail -1 "$L/${preset}_one.json")" | tee -a "$L/device.txt"
  docs="one"
  [ "$preset" = 7b ] && docs="one random"
  for d in $docs; do
    LOOM_BENCH_DOCS=$d LOOM_BENCH_STEPS=5 LOOM_BENCH_TAG=${preset}_${d}_prof LOOM_TRAIN_EXTRA=--profiling timeout 150 \
      bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$L" > "$L/${preset}_${d}_prof.json" 2> "$L/${preset}_${d}_prof.err"
    echo "$preset $d profiled at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
  done
  # The step's wall time and the layers the plan recomputed (model.checkpoint=auto): the ceiling
  # then counts their second forward too.
  read -r step_s recompute < <(python3 -c "import json,sys; r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); \
print(r['step_s'], round((r.get('plan_checkpoint') or 0) * int(sys.argv[2])))" "$L/${preset}_one.json" \
    "$([ "$preset" = 7b ] && echo 32 || echo 24)" 2>/dev/null)
  timeout 120 python3 bench/gpu/step_ceilings.py --preset "$preset" --summary "$L/trace_${preset}_one_prof.txt" \
    ${step_s:+--step-s "$step_s"} --recompute-layers "${recompute:-0}" 2>&1 | tee -a "$L/device.txt"
  echo "$preset ceilings at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
done
export PATH="/tmp/loom-prefix/usr/bin:$PATH"
if [ "$(left)" -gt 100 ]; then
  PY=python3 RUNS=${RUNS:-5} FILES=${FILES:-1000} timeout "$(( $(left) - 10 ))" bash bench/short_docs_bench.sh build-gpu 0 \
    > "$L/short_docs.md" 2> "$L/short_docs.err"
  echo "short_docs_bench rc=$? at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
  cat "$L/short_docs.md" >> "$L/device.txt"
fi
rm -f "$L"/trace_*.json.gz
tar czf "$OUT/logs.tgz" -C "$OUT" logs
cp "$L/device.txt" "$OUT/summary.txt"
