#!/usr/bin/env bash
# One device call (<= 600 s) for the short-documents targets, most important first, each step under
# its own timeout so what ran still reports: build loom-train, loom-tokenize, loom-pack and the GPU
# tests; the attention tests (the kernels and the cudnn rule, float64 references); plan == run
# on the 1b preset (bench/gpu/plan_vs_run.sh); then bench/gpu/targets.sh's density set, its flex
# peer given whatever time is left. Logs in $OUT/logs.tgz, the summary on stdout.
# Usage (device tool, carry [".debs"]): bash bench/gpu/density_call.sh   (LOOM_CALL_S, default 570;
# LOOM_DENSITY_PLAN=0 skips plan == run, LOOM_DENSITY_TESTS=0 the GPU tests)
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/call_env.sh
if [ "${LOOM_DENSITY_TESTS:-1}" = 1 ]; then
  build_for_call loom-train loom-tokenize loom-pack test_gpu
  run_gpu_tests "*attention*"
else
  build_for_call loom-train loom-tokenize loom-pack
fi
if [ "${LOOM_DENSITY_PLAN:-1}" = 1 ]; then
  timeout 80 bash bench/gpu/plan_vs_run.sh "$L" 1b | tee -a "$L/device.txt"
  echo "plan_vs_run at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
fi
# The flex peer's timeout is computed when its turn comes: the loom runs go first.
export LOOM_TARGET_SETS=density LOOM_DENSITY_SDPA_PEER=${LOOM_DENSITY_SDPA_PEER:-0} LOOM_DENSITY_TAR=0
LOOM_FLEX_DEADLINE=$(( T0 + ${LOOM_CALL_S:-570} - 15 )) timeout "$(left)" bash bench/gpu/targets.sh "$L" | tee -a "$L/device.txt"
echo "density at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs
cp "$L/device.txt" "$OUT/summary.txt"
