#!/usr/bin/env bash
# One device call: loom-pack on short real documents against cp on the GPU machine's cores, an older
# tree (build-base/src.tar, as bench/gpu/loop_ab_call.sh takes it) beside this one: both build
# loom-tokenize and loom-pack at once, then bench/pack_bench.sh BUILD short runs for base, current,
# base, current (RUNS each). Also says whether libtorch_cuda.so exports cuDNN's SDPA runners
# (run_cudnn_SDP_fprop / _bprop, which take their output tensors). LOOM_AB_TESTS (a test_gpu filter, as
# bench/gpu/loop_ab_call.sh takes it) also builds loom-train and test_gpu here and runs those tests first.
# Here: mkdir -p build-base && git archive BASE > build-base/src.tar; device tool: carry
# [".debs", "build-base"]; bash bench/gpu/pack_ab_call.sh   (LOOM_CALL_S, default 570; RUNS, 5)
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/call_env.sh
build_with_base "loom-tokenize loom-pack${LOOM_AB_TESTS:+ loom-train test_gpu}" "loom-tokenize loom-pack"
[ -n "${LOOM_AB_TESTS:-}" ] && run_gpu_tests "$LOOM_AB_TESTS"
lib=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
echo "exported cuDNN SDPA runners in $lib: $(nm -D --defined-only "$lib" 2>/dev/null | grep -c 'run_cudnn_SDP')" | tee -a "$L/device.txt"
nm -D --defined-only "$lib" 2>/dev/null | grep 'run_cudnn_SDP' | c++filt | head -8 | tee -a "$L/device.txt"
for round in 1 2; do
  for tree in base current; do
    b=$ROOT/build-gpu; [ "$tree" = base ] && b=$BASE_TREE/build-gpu
    [ "$(left)" -gt 60 ] || { echo "no time left for $tree round $round" | tee -a "$L/device.txt"; continue; }
    echo "### $tree, round $round" >> "$L/device.txt"
    PY=python3 RUNS=${RUNS:-5} timeout "$(( $(left) - 5 ))" bash bench/pack_bench.sh "$b" short 2>> "$L/pack_err.txt" \
      | grep -E "^\| .cp|^- machine|^- input" | tee -a "$L/device.txt"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs
cp "$L/device.txt" "$OUT/summary.txt"
