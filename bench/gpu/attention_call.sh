#!/usr/bin/env bash
# One device call (<= 600 s) for the attention kernels of this tree: build loom-train, the packers and
# the GPU tests; the attention tests (float64 references); bench/gpu/cudnn_sdpa_call.sh (loom's cuDNN
# graphs alone: checks and per-layer times); then loom-train's tokens/s for each run of
# LOOM_ATT_RUNS, "PRESET:MICRO_BSZ:CHECKPOINT:DOCS:ATTENTION" (make_packed.py --docs, job.attention),
# default the 1b on one-document, random, paragraph and sft16 packs with auto, and the last two with
# flash (FlashAttention-2 varlen) beside it. Logs in $OUT/logs.tgz, one JSON line per run in $OUT/runs.jsonl, the summary on
# stdout. Usage (device tool, carry [".debs"]): bash bench/gpu/attention_call.sh   (LOOM_CALL_S, 570)
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/call_env.sh
build_for_call loom-train loom-tokenize loom-pack test_gpu
run_gpu_tests "${LOOM_ATT_TESTS:-*attention*,*cuDNN*,*cudnn*}"
OUT=$L timeout 150 bash bench/gpu/cudnn_sdpa_call.sh > /dev/null 2>&1
grep -E '^== probe|^check|^time|rror' "$L/sdpa.txt" | tee -a "$L/device.txt"
RUNS=${LOOM_ATT_RUNS:-"1b:4:0:one:auto 1b:4:0:random:auto 1b:4:0:paragraphs:auto 1b:4:0:paragraphs:flash 1b:4:0:sft16:auto 1b:4:0:sft16:flash"}
D=$(mktemp -d /tmp/loom-att-XXXX)
for run in $RUNS; do
  IFS=: read -r preset bsz ckpt docs att <<< "$run"
  data=$D/${preset}_${bsz}_$docs.bin
  [ -f "$data" ] || python3 bench/gpu/make_packed.py "$data" --seq-len 4096 --packs $(( bsz * 14 )) --docs "$docs" \
    --tools build-gpu --stats-json "$L/packs_${preset}_$docs.json" >> "$L/packs.log" 2>&1
  [ "$(left)" -gt 60 ] || { echo "no time left for $run" | tee -a "$L/device.txt"; continue; }
  line=$(LOOM_BENCH_DATA=$data LOOM_BENCH_STEPS=12 LOOM_BENCH_TAG="${preset}_${docs}_$att" \
         LOOM_TRAIN_EXTRA="--job.attention=$att" timeout 150 bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$L" \
         2>>"$L/run_err.txt")
  [ -n "$line" ] || line="{\"preset\": \"$preset\", \"error\": \"failed\"}"
  echo "${line%\}}, \"docs\": \"$docs\", \"attention\": \"$att\"}" | tee -a "$OUT/runs.jsonl" "$L/device.txt"
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs
cp "$L/device.txt" "$OUT/summary.txt"
