#!/usr/bin/env bash
# One device call (<= 600 s): build loom-train, loom-tokenize and loom-pack, then
# `CORPUS=pystdlib bash bench/gpu/fp8_quality.sh` (1,000 steps of the 1b shape at micro_bsz 1, bf16
# and fp8, two seeds). Logs and the four metrics.jsonl files in $OUT/logs.tgz, the summary on stdout
# and in $OUT/summary.txt.
# Usage (device tool, carry [".debs"]): bash bench/gpu/fp8_quality_call.sh   (LOOM_CALL_S, default 590)
set -uo pipefail
cd "$(dirname "$0")/../.."
LOOM_CALL_S=${LOOM_CALL_S:-590}
source bench/gpu/call_env.sh
build_for_call loom-train loom-tokenize loom-pack
CORPUS=pystdlib timeout "$(left)" bash bench/gpu/fp8_quality.sh "$L" "${LOOM_FP8Q_STEPS:-1000}" 2>&1 | tee -a "$L/device.txt"
echo "fp8 quality done at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs
cp "$L/device.txt" "$OUT/summary.txt"
