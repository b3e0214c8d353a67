#!/usr/bin/env bash
# Where a step's time goes against what each part could take at best, and the pipeline's CPU stages
# on the machine's cores (bench/gpu/call.sh's ceilings set; loom-train, loom-tokenize and loom-pack
# built in build-gpu). For PRESETS (LOOM_CEIL_PRESETS, default "1b 7b"; the 7b needs an H200) on
# one-document packs an unprofiled run (its wall step time) and a profiled one (--profiling, summed
# by bench/gpu/trace_summary.py), and bench/gpu/step_ceilings.py on them; the 7b also on random
# packs, profiled (two documents a pack: where per-document attention loses against one). Last,
# with what time is left of LOOM_CALL_S (unless LOOM_CEIL_PIPELINE=0), bench/short_docs_bench.sh on
# all cores (spm_encode from the carried sentencepiece .deb). LOOM_CEIL_PRESETS may also name
# recipe_fp8 and recipe_bf16 (below).
# Usage: bench/gpu/ceilings.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
L=${1:?usage: bench/gpu/ceilings.sh OUT_DIR}
T0=${T0:-$(date +%s)}
left() { echo $(( ${LOOM_CALL_S:-570} - ($(date +%s) - T0) )); }
# recipe_fp8 and recipe_bf16: NeMo's recipe on the 7b's layers (the 7b12 at micro_bsz 1, 16
# micro-batches a step: LOOM_RECIPE_MICRO_NUM) in that precision, 8 steps unprofiled and 4 profiled.
for preset in ${LOOM_CEIL_PRESETS:-1b 7b}; do
  model=$preset micro=1 extra="" flags="" steps=12 warmup=3 prof_steps=5
  case "$preset" in
    1b) bsz=4 ckpt=0 layers=24 ;;
    7b) bsz=1 ckpt=auto layers=32 ;;
    recipe_fp8|recipe_bf16)
      model=7b12 bsz=1 ckpt=auto layers=12 micro=${LOOM_RECIPE_MICRO_NUM:-16} steps=8 warmup=2 prof_steps=4
      extra="--model.precision=${preset#recipe_}" flags="--micro-num $micro"
      [ "$preset" = recipe_fp8 ] && flags="$flags --fp8" ;;
    *) echo "unknown preset $preset"; continue ;;
  esac
  LOOM_BENCH_DOCS=one LOOM_BENCH_STEPS=$steps LOOM_BENCH_WARMUP=$warmup LOOM_BENCH_MICRO_NUM=$micro LOOM_BENCH_TAG=${preset}_one \
    LOOM_TRAIN_EXTRA="$extra" timeout 150 \
    bash bench/gpu/loom_train.sh "$model" "$bsz" "$ckpt" "$L" > "$L/${preset}_one.json" 2> "$L/${preset}_one.err"
  echo "$preset one: $(tail -1 "$L/${preset}_one.json")"
  docs="one"
  [ "$preset" = 7b ] && docs="one random"
  for d in $docs; do
    LOOM_BENCH_DOCS=$d LOOM_BENCH_STEPS=$prof_steps LOOM_BENCH_MICRO_NUM=$micro LOOM_BENCH_TAG=${preset}_${d}_prof \
      LOOM_TRAIN_EXTRA="$extra --profiling" timeout 150 \
      bash bench/gpu/loom_train.sh "$model" "$bsz" "$ckpt" "$L" > "$L/${preset}_${d}_prof.json" 2> "$L/${preset}_${d}_prof.err"
    echo "$preset $d profiled at $(( $(date +%s) - T0 )) s"
  done
  # The step's wall time and the layers the plan recomputed (model.checkpoint=auto): the ceiling
  # then counts their second forward too.
  read -r step_s recompute < <(python3 -c "import json,sys; r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); \
print(r['step_s'], round((r.get('plan_checkpoint') or 0) * int(sys.argv[2])))" "$L/${preset}_one.json" "$layers" 2>/dev/null)
  # shellcheck disable=SC2086  # flags are words
  timeout 120 python3 bench/gpu/step_ceilings.py --preset "$model" $flags --summary "$L/trace_${preset}_one_prof.txt" \
    ${step_s:+--step-s "$step_s"} --recompute-layers "${recompute:-0}" 2>&1
  echo "$preset ceilings at $(( $(date +%s) - T0 )) s"
done
export PATH="/tmp/loom-prefix/usr/bin:$PATH"
if [ "${LOOM_CEIL_PIPELINE:-1}" = 1 ] && [ "$(left)" -gt 100 ]; then
  PY=python3 RUNS=${RUNS:-5} FILES=${FILES:-1000} timeout "$(( $(left) - 10 ))" bash bench/short_docs_bench.sh build-gpu 0 \
    > "$L/short_docs.md" 2> "$L/short_docs.err"
  echo "short_docs_bench rc=$? at $(( $(date +%s) - T0 )) s"
  cat "$L/short_docs.md"
fi
