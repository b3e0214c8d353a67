#!/usr/bin/env bash
# One device call (<= 600 s) after bench/gpu/loop_ab_call.sh on the same warm machine (build-gpu
# kept): job.deterministic's GPU test (two bf16 runs bitwise equal) and its cost in tokens/s on the
# 1b preset (one-document packs, default and deterministic, alternating), then the 7b preset at
# seq_len 16384 and 32768 (micro_bsz 1, model.checkpoint=auto): MFU and peak memory against the plan.
# Device tool: carry [".debs"]; bash bench/gpu/deterministic_long_call.sh   (LOOM_CALL_S, default 570)
# Logs in $OUT/logs.tgz, JSON lines in $OUT/runs.jsonl, the summary on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/call_env.sh
build_for_call loom-train loom-tokenize loom-pack test_gpu
timeout 120 build-gpu/tests/gpu/test_gpu "*deterministic*" -s > "$L/gpu_deterministic.log" 2>&1
echo "deterministic test rc=$? at $(( $(date +%s) - T0 )) s: $(grep -E 'test cases|without job.deterministic' "$L/gpu_deterministic.log" | tr '\n' ' ')" | tee -a "$L/device.txt"
grep -B3 -A12 FAILED "$L/gpu_deterministic.log" | head -40
D=$(mktemp -d /tmp/loom-det-XXXX)
python3 bench/gpu/make_packed.py "$D/1b.bin" --seq-len 4096 --packs 56 --docs one --tools build-gpu >> "$L/packs.log" 2>&1
run() {  # tag preset bsz ckpt [extra...]
  local tag=$1 preset=$2 bsz=$3 ckpt=$4; shift 4
  [ "$(left)" -gt 80 ] || { echo "no time left for $tag" | tee -a "$L/device.txt"; return; }
  local line
  line=$(LOOM_TRAIN_EXTRA="$*" LOOM_BENCH_TAG=$tag timeout 170 bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$L" 2>>"$L/err_$tag.txt")
  [ -n "$line" ] || line="{\"preset\": \"$preset\", \"error\": \"failed\"}"
  echo "${line%\}}, \"tag\": \"$tag\"}" | tee -a "$OUT/runs.jsonl"
}
for round in 1 2; do
  LOOM_BENCH_DATA=$D/1b.bin LOOM_BENCH_STEPS=12 run "1b_default_$round" 1b 4 0
  LOOM_BENCH_DATA=$D/1b.bin LOOM_BENCH_STEPS=12 run "1b_deterministic_$round" 1b 4 0 --job.deterministic=true
done
for seq in 16384 32768; do
  LOOM_BENCH_SEQ_LEN=$seq LOOM_BENCH_DOCS=one LOOM_BENCH_STEPS=8 LOOM_BENCH_WARMUP=3 run "7b_seq$seq" 7b 1 auto
done
echo "done at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs
