#!/usr/bin/env bash
# One device call (<= 600 s) for the speed targets on one-document packs: build loom-train,
# loom-tokenize and loom-pack, then bench/gpu/targets.sh's precision set (1b and 7b in bf16 and fp8,
# HF transformers compiled on the 1b shape, loom's 1b on document-masked packs beside it). The 7b
# needs an H200 (run with needs_h200). Logs in $OUT/logs.tgz, the summary on stdout and in
# $OUT/summary.txt.
# Usage (device tool, carry [".debs"]): bash bench/gpu/targets_call.sh   (LOOM_CALL_S, default 570)
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/call_env.sh
build_for_call loom-train loom-tokenize loom-pack
LOOM_TARGET_SETS=precision LOOM_BENCH_STEPS=${LOOM_BENCH_STEPS:-20} timeout "$(left)" bash bench/gpu/targets.sh "$L" \
  2>&1 | tee -a "$L/device.txt"
echo "precision set done at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs
cp "$L/device.txt" "$OUT/summary.txt"
