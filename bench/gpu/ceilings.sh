#!/usr/bin/env bash
# Where a step's time goes against what each part could take at best, and the pipeline's CPU stages
# on the machine's cores (bench/gpu/call.sh's ceilings set; loom-train, loom-tokenize and loom-pack
# built in build-gpu). For PRESETS (LOOM_CEIL_PRESETS, default "1b 7b"; the 7b needs an H200) on
# one-document packs an unprofiled run (its wall step time) and a profiled one (--profiling, summed
# by bench/gpu/trace_summary.py), and bench/gpu/step_ceilings.py on them; the 7b also on random
# packs, profiled (two documents a pack: where per-document attention loses against one). Last,
# with what time is left of LOOM_CALL_S, bench/short_docs_bench.sh on all cores (spm_encode from
# the carried sentencepiece .deb). Usage: bench/gpu/ceilings.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
L=${1:?usage: bench/gpu/ceilings.sh OUT_DIR}
T0=${T0:-$(date +%s)}
left() { echo $(( ${LOOM_CALL_S:-570} - ($(date +%s) - T0) )); }
for preset in ${LOOM_CEIL_PRESETS:-1b 7b}; do
  case "$preset" in 1b) bsz=4 ckpt=0 layers=24 ;; 7b) bsz=1 ckpt=auto layers=32 ;; *) echo "unknown preset $preset"; continue ;; esac
  LOOM_BENCH_DOCS=one LOOM_BENCH_STEPS=12 LOOM_BENCH_TAG=${preset}_one timeout 150 \
    bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$L" > "$L/${preset}_one.json" 2> "$L/${preset}_one.err"
  echo "$preset one: $(tail -1 "$L/${preset}_one.json")"
  docs="one"
  [ "$preset" = 7b ] && docs="one random"
  for d in $docs; do
    LOOM_BENCH_DOCS=$d LOOM_BENCH_STEPS=5 LOOM_BENCH_TAG=${preset}_${d}_prof LOOM_TRAIN_EXTRA=--profiling timeout 150 \
      bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$L" > "$L/${preset}_${d}_prof.json" 2> "$L/${preset}_${d}_prof.err"
    echo "$preset $d profiled at $(( $(date +%s) - T0 )) s"
  done
  # The step's wall time and the layers the plan recomputed (model.checkpoint=auto): the ceiling
  # then counts their second forward too.
  read -r step_s recompute < <(python3 -c "import json,sys; r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); \
print(r['step_s'], round((r.get('plan_checkpoint') or 0) * int(sys.argv[2])))" "$L/${preset}_one.json" "$layers" 2>/dev/null)
  timeout 120 python3 bench/gpu/step_ceilings.py --preset "$preset" --summary "$L/trace_${preset}_one_prof.txt" \
    ${step_s:+--step-s "$step_s"} --recompute-layers "${recompute:-0}" 2>&1
  echo "$preset ceilings at $(( $(date +%s) - T0 )) s"
done
export PATH="/tmp/loom-prefix/usr/bin:$PATH"
if [ "$(left)" -gt 100 ]; then
  PY=python3 RUNS=${RUNS:-5} FILES=${FILES:-1000} timeout "$(( $(left) - 10 ))" bash bench/short_docs_bench.sh build-gpu 0 \
    > "$L/short_docs.md" 2> "$L/short_docs.err"
  echo "short_docs_bench rc=$? at $(( $(date +%s) - T0 )) s"
  cat "$L/short_docs.md"
fi
