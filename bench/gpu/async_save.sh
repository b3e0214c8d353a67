#!/usr/bin/env bash
# Asynchronous saves of the 1b preset on one GPU (1.66B parameters, 23 GB per checkpoint with fp32
# master weights and moments): for each mode, replicated and ZeRO-3 over NCCL (one rank), every
# save's `training blocked` seconds (previous write, ZeRO-3's weight gather, copies to host), the
# preparation of the host buffers (faulted in and page-locked on a background thread from start-up,
# checkpoint/host_block.h), the background write times, and the mean step time before the first
# save (while the buffers are prepared) and after it.
#   LOOM_SAVE_EVERY (default 80, about 28 s of steps: longer than a 23 GB write at ~1 GB/s, so no
#   save waits for the previous write): steps between saves, 3 saves in all. With 3 the first save
#   comes about a second after the first step, before the buffers are ready: it waits for them
#   (logged), and later saves wait for the previous write.
#   LOOM_SAVE_MODES (default "replicated zero3"): one mode per call keeps a call under 10 minutes.
# Run on the GPU machine after scripts/device/build.sh. Usage: bench/gpu/async_save.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: bench/gpu/async_save.sh OUT_DIR}
mkdir -p "$OUT"
EVERY=${LOOM_SAVE_EVERY:-80} BSZ=4
STEPS=$((3 * EVERY))
for mode in ${LOOM_SAVE_MODES:-replicated zero3}; do
  if [ "$mode" = replicated ]; then extra="--parallel.zero1=1"
  else extra="--parallel.backend=nccl --parallel.zero1=-1 --parallel.zero_stage=3"; fi
  WORK=$(mktemp -d /tmp/loom-save-XXXX)
  mkdir -p "$WORK/train/synthetic"
  python3 bench/gpu/make_packed.py "$WORK/train/synthetic/part0.bin" --seq-len 4096 --packs $((BSZ * (STEPS + 2))) >&2
  echo "== 1b $mode, a save every $EVERY steps" >&2
  # shellcheck disable=SC2086  # $extra: a list of flags
  timeout 500 build-gpu/trainer/loom-train --job.run_dir="$WORK/run" --job.device=cuda --model.dtype=bfloat16 \
    --job.peak_tflops=989 --job.tensorboard=false --job.log_every=1 --data.train_folder="$WORK/train" \
    --data.seq_len=4096 --data.micro_bsz=$BSZ --data.micro_num=1 --data.total_steps=$STEPS --model.vocab_size=103168 \
    --model.checkpoint=0 --model.hidden_size=2048 --model.num_layers=24 --model.num_attention_heads=16 \
    --ckpt.async_save=true --ckpt.checkpoint_every="$EVERY" --ckpt.keep=1 $extra > "$OUT/save_$mode.log" 2>&1 \
    || { echo "$mode failed" >&2; tail -20 "$OUT/save_$mode.log" >&2; }
  python3 - "$WORK/run/metrics.jsonl" "$OUT/save_$mode.log" "$mode" "$EVERY" <<'PY'
import json, re, sys
metrics, log, mode, every = sys.argv[1], open(sys.argv[2], errors="replace").read(), sys.argv[3], int(sys.argv[4])
num = r"([0-9.eE+-]+)"
blocked = [float(x) for x in re.findall(r"checkpoint of step \d+: training blocked " + num, log)]
copies = [float(x) for x in re.findall(r"checkpoint step \d+: training blocked [0-9.eE+-]+ s \(copy " + num, log)]
waited = [float(x) for x in re.findall(r"waited " + num + r" s for the host buffers", log)]
ready = re.findall(r"checkpoint host buffers ready: (.*)", log)
written = [float(x) for x in re.findall(r"written in the background \(step \d+, " + num, log)]
try:
    rows = [json.loads(l) for l in open(metrics) if '"step_time"' in l]
except OSError:
    rows = []
mean = lambda xs: round(sum(xs) / len(xs), 4) if xs else None
print(json.dumps(dict(mode=mode, save_every=every, blocked_s=blocked, host_copy_s=copies, waited_for_buffers_s=waited,
                      buffers=ready, write_s=written,
                      step_s_before_first_save=mean([r["step_time"] for r in rows if 2 < r["step"] <= every]),
                      step_s_after=mean([r["step_time"] for r in rows if r["step"] > every + 1 and r["step"] % every != 1]))))
PY
  rm -rf "$WORK"
done | tee "$OUT/async_save.jsonl"
