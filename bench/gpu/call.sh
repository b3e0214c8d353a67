#!/usr/bin/env bash
# The one device call for loom's GPU figures: builds what the named sets need, then runs the sets in
# the order given, each under the time left of LOOM_CALL_S (default 570 s, under the device tool's
# 600), so a set that overruns still leaves the summary. Sets:
#   tests        the GPU tests (test_gpu; LOOM_GPU_TEST_FILTER, default all), before any figure
#   plan         `loom-train plan` against a run of the 1b: same kernel, plan total beside the peak
#   precision    targets.sh: 1b and 7b in bf16 and fp8 on one-document packs, HF compiled beside
#   density      targets.sh: the 1b (and LOOM_DENSITY_PRESETS) on five document densities, flex peer
#   recipe       targets.sh: NeMo's recipe (seq 4096, micro_bsz 1, 16 micro-batches) in bf16 and
#                fp8, the HF compiled and flex peers on the same packs
#   budget       targets.sh: everything but GEMM and attention in a 1b step against its goal (34 ms)
#   ceilings     each part of a step against its measured bound (ceilings.sh, step_ceilings.py)
#   attention    loom-train's attention kernels (LOOM_ATT_RUNS) on document densities
#   sdpa         loom's cuDNN graphs alone, checked against float64 and timed (cudnn_sdpa.sh)
#   deterministic  job.deterministic's test, its cost on the 1b, and the 7b at seq 16k and 32k
#   fp8_quality  FP8 against bf16 over LOOM_FP8Q_STEPS (1000) steps of real text (fp8_quality.sh)
#   ab           loom-train against an older commit (ab_base.sh; LOOM_AB_SPECS, build-base/src.tar)
# The summary lands on stdout and in $OUT/summary.txt, every log in $OUT/logs.tgz.
# LOOM_BENCH_MICRO_NUM, _SEQ_LEN, _DATA and _DOCS (bench/gpu/loom_train.sh's) shape the runs of ab,
# attention and deterministic; precision, density, recipe, budget and ceilings set their own, as
# their peers and bounds assume (one micro-batch for a density, sixteen for the recipe).
# LOOM_BENCH_STEPS, _WARMUP and _BIN pass through; a set that fixes its runs' length sets its own.
# Usage (device tool, carry [".debs"]): bash bench/gpu/call.sh SET [SET...]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
SETS="tests plan precision density recipe budget ceilings attention sdpa deterministic fp8_quality ab"
[ $# -ge 1 ] || { echo "usage: bench/gpu/call.sh SET [SET...] ($SETS)" >&2; exit 2; }
for set in "$@"; do
  [[ " $SETS " == *" $set "* ]] || { echo "unknown set $set ($SETS)" >&2; exit 2; }
done
# shellcheck disable=SC1091  # call_env.sh is checked on its own
source bench/gpu/call_env.sh
export T0 LOOM_CALL_S=${LOOM_CALL_S:-570}

# Runs loom_train.sh once: TAG PRESET MICRO_BSZ CKPT [loom-train flags...]; one JSON line (with the
# tag) in L/runs.jsonl and the summary. LOOM_BENCH_* in the environment pick the data and steps.
run_tagged() {
  local tag=$1 preset=$2 bsz=$3 ckpt=$4 line
  shift 4
  [ "$(left)" -gt 80 ] || { echo "no time left for $tag"; return; }
  line=$(LOOM_TRAIN_EXTRA="$*" LOOM_BENCH_TAG=$tag timeout 170 bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$L" \
         2>>"$L/err_$tag.txt")
  [ -n "$line" ] || line="{\"preset\": \"$preset\", \"error\": \"failed\"}"
  echo "${line%\}}, \"tag\": \"$tag\"}" | tee -a "$L/runs.jsonl"
}

attention() {  # each of LOOM_ATT_RUNS, PRESET:MICRO_BSZ:CKPT:DOCS:ATTENTION, 12 steps
  local runs=${LOOM_ATT_RUNS:-"1b:4:0:one:auto 1b:4:0:random:auto 1b:4:0:paragraphs:auto 1b:4:0:paragraphs:flash 1b:4:0:sft16:auto 1b:4:0:sft16:flash"}
  local D run preset bsz ckpt docs att data
  D=$(mktemp -d /tmp/loom-att-XXXX)
  for run in $runs; do
    IFS=: read -r preset bsz ckpt docs att <<< "$run"
    data=$D/${preset}_${bsz}_$docs.bin
    [ -f "$data" ] || python3 bench/gpu/make_packed.py "$data" --seq-len 4096 --packs $(( bsz * 14 )) --docs "$docs" \
      --tools build-gpu --stats-json "$L/packs_${preset}_$docs.json" >> "$L/packs.log" 2>&1
    LOOM_BENCH_DATA=$data LOOM_BENCH_STEPS=12 run_tagged "${preset}_${docs}_$att" "$preset" "$bsz" "$ckpt" --job.attention="$att"
  done
}

deterministic() {  # the test, default against deterministic twice on the 1b, then the 7b's long sequences
  local D round seq
  timeout 120 build-gpu/tests/gpu/test_gpu "*deterministic*" -s > "$L/gpu_deterministic.log" 2>&1
  echo "deterministic test rc=$?: $(grep -E 'test cases|without job.deterministic' "$L/gpu_deterministic.log" | tr '\n' ' ')"
  D=$(mktemp -d /tmp/loom-det-XXXX)
  python3 bench/gpu/make_packed.py "$D/1b.bin" --seq-len 4096 --packs 56 --docs one --tools build-gpu >> "$L/packs.log" 2>&1
  for round in 1 2; do
    LOOM_BENCH_DATA=$D/1b.bin LOOM_BENCH_STEPS=12 run_tagged "1b_default_$round" 1b 4 0
    LOOM_BENCH_DATA=$D/1b.bin LOOM_BENCH_STEPS=12 run_tagged "1b_deterministic_$round" 1b 4 0 --job.deterministic=true
  done
  for seq in 16384 32768; do
    LOOM_BENCH_SEQ_LEN=$seq LOOM_BENCH_DOCS=one LOOM_BENCH_STEPS=8 LOOM_BENCH_WARMUP=3 run_tagged "7b_seq$seq" 7b 1 auto
  done
}

# Runs a command without the caller's run shape: a set with peers or bounds sets its own.
own_shape() { env -u LOOM_BENCH_MICRO_NUM -u LOOM_BENCH_SEQ_LEN -u LOOM_BENCH_DATA -u LOOM_BENCH_DOCS "$@"; }

targets="loom-train loom-tokenize loom-pack"
[[ " $* " == *" tests "* || " $* " == *" deterministic "* ]] && targets="$targets test_gpu"
# shellcheck disable=SC2086  # the targets are words
build_for_call $targets
for set in "$@"; do
  case "$set" in
    tests) run_gpu_tests "${LOOM_GPU_TEST_FILTER:-*}" ;;
    plan) timeout "$(left)" bash bench/gpu/plan_vs_run.sh "$L" 1b 2>&1 | tee -a "$L/device.txt" ;;
    precision|recipe|budget)
      own_shape LOOM_TARGET_SETS="$set" LOOM_RECIPE_DEADLINE=$(( T0 + LOOM_CALL_S - 15 )) timeout "$(left)" \
        bash bench/gpu/targets.sh "$L" 2>&1 | tee -a "$L/device.txt" ;;
    density)
      own_shape LOOM_TARGET_SETS=density LOOM_DENSITY_TAR=0 LOOM_FLEX_DEADLINE=$(( T0 + LOOM_CALL_S - 15 )) \
        timeout "$(left)" bash bench/gpu/targets.sh "$L" 2>&1 | tee -a "$L/device.txt" ;;
    ceilings) own_shape timeout "$(left)" bash bench/gpu/ceilings.sh "$L" 2>&1 | tee -a "$L/device.txt" ;;
    attention) attention 2>&1 | tee -a "$L/device.txt" ;;
    sdpa) OUT=$L timeout "$(left)" bash bench/gpu/cudnn_sdpa.sh > /dev/null 2>&1
          grep -E '^== probe|^check|^time|rror' "$L/sdpa.txt" | tee -a "$L/device.txt" ;;
    deterministic) deterministic 2>&1 | tee -a "$L/device.txt" ;;
    fp8_quality) CORPUS=${CORPUS:-pystdlib} timeout "$(left)" bash bench/gpu/fp8_quality.sh "$L" "${LOOM_FP8Q_STEPS:-1000}" \
                   2>&1 | tee -a "$L/device.txt" ;;
    ab) timeout "$(left)" bash bench/gpu/ab_base.sh "$L" "${LOOM_AB_SPECS:?ab needs LOOM_AB_SPECS}" 2>&1 | tee -a "$L/device.txt" ;;
  esac
  echo "set $set done at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
done
rm -f "$L"/trace_*.json.gz
tar czf "$OUT/logs.tgz" -C "$OUT" logs
cp "$L/device.txt" "$OUT/summary.txt"
