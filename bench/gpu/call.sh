#!/usr/bin/env bash
# The one device call for loom's GPU figures: builds what the named sets need, then runs each set of
# bench/gpu/targets.sh (and the others below) in order, each under the time left of LOOM_CALL_S
# (default 570 s, under the device tool's 600), so a set that overruns still leaves the summary.
# Sets:
#   tests      the GPU tests (test_gpu, CTest label gpu), before any figure
#   precision  targets.sh: 1b and 7b in bf16 and fp8 on one-document packs, HF compiled beside
#   density    targets.sh: the 1b (and LOOM_DENSITY_PRESETS) on five document densities, flex peer
#   recipe     targets.sh: NeMo's recipe (seq 4096, micro_bsz 1, 16 micro-batches) in bf16 and fp8,
#              the HF compiled and flex peers on the same packs
#   ceilings   each part of a step against its measured bound (bench/gpu/step_ceilings.py)
# The summary lands on stdout and in $OUT/summary.txt, every log in $OUT/logs.tgz.
# Usage (device tool, carry [".debs"]): bash bench/gpu/call.sh SET [SET...]
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: bench/gpu/call.sh SET [SET...] (tests precision density recipe ceilings)" >&2; exit 2; }
source bench/gpu/call_env.sh
export T0 LOOM_CALL_S=${LOOM_CALL_S:-570}
targets="loom-train loom-tokenize loom-pack"
[[ " $* " == *" tests "* ]] && targets="$targets test_gpu"
build_for_call $targets
for set in "$@"; do
  case "$set" in
    tests) run_gpu_tests "${LOOM_GPU_TEST_FILTER:-*}" ;;
    precision|recipe)
      LOOM_TARGET_SETS=$set timeout "$(left)" bash bench/gpu/targets.sh "$L" 2>&1 | tee -a "$L/device.txt" ;;
    density)
      LOOM_TARGET_SETS=density LOOM_DENSITY_TAR=0 LOOM_FLEX_DEADLINE=$(( T0 + ${LOOM_CALL_S:-570} - 15 )) \
        timeout "$(left)" bash bench/gpu/targets.sh "$L" 2>&1 | tee -a "$L/device.txt" ;;
    ceilings) timeout "$(left)" bash bench/gpu/ceilings.sh "$L" 2>&1 | tee -a "$L/device.txt" ;;
    *) echo "unknown set $set (tests precision density recipe ceilings)" | tee -a "$L/device.txt" ;;
  esac
  echo "set $set done at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
done
rm -f "$L"/trace_*.json.gz
tar czf "$OUT/logs.tgz" -C "$OUT" logs
cp "$L/device.txt" "$OUT/summary.txt"
