#!/usr/bin/env bash
# A/B of bench/gpu/optimizer_fast.patch, the change proposed for trainer/optim/optimizer.cpp (CUDA: the
# gradient norm as one fp32-accumulating reduction per tensor, the clip coefficient and the bf16
# weight copy inside loom's AdamW kernel): run ON THE GPU MACHINE after scripts/device/run.sh built
# the tree as it is. Applies the patch to this copy of the tree, rebuilds loom-train, runs the
# loom rows of bench/gpu/run.sh again and prints their JSON lines; with LOOM_AB_PROFILE=1 also a
# 1b run with --profiling whose summary lands in OUT_DIR/trace_1b.txt. Reverts the patch at the end.
# Usage: bash bench/gpu/ab_optimizer.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bench/gpu/ab_optimizer.sh OUT_DIR}
P=bench/gpu/optimizer_fast.patch
if git apply -R --check "$P" 2>/dev/null; then
  echo "ab: $P is already in this tree: nothing to compare (bench/gpu/run.sh's rows include it)"
  exit 0
fi
git apply "$P" 2>/dev/null || patch -p1 --forward < "$P" || { echo "ab: $P does not apply"; exit 1; }
T0=$(date +%s)
LOOM_TARGETS=loom-train bash scripts/device/build.sh > "$OUT/build_patched.log" 2>&1
echo "ab: patched build rc=$? in $(( $(date +%s) - T0 )) s"
W=$(mktemp -d /tmp/loom-ab-XXXX)
LOOM_BENCH_SYSTEMS=loom bash bench/gpu/run.sh "$W" > "$W/bench.log" 2>&1
echo "ab: patched bench rows:"
cat "$W/bench.jsonl"
for f in "$W"/loom_*.log; do grep -E "INFO step (4|8)/|memory at" "$f" | cut -c1-600; done
if [ "${LOOM_AB_PROFILE:-0}" = 1 ]; then
  mkdir -p "$W/prof"
  LOOM_TRAIN_EXTRA=--profiling bash bench/gpu/loom_train.sh 1b 2 0 "$W/prof" && cp "$W/prof/trace_1b.txt" "$OUT/"
fi
git apply -R "$P" 2>/dev/null || patch -R -p1 < "$P"
rm -rf "$W"
