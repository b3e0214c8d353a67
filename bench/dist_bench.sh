#!/usr/bin/env bash
# loom-train's data parallel on CPU (Gloo over loopback): tokens/s of the same model and the same
# global batch (12 packs of 256 tokens per step) at 1, 2 and 3 processes, one intra-op thread each,
# launched with torchrun's variables. Appends a section to bench/history/log.md (LOOM_BENCH_LOG).
#   bash bench/dist_bench.sh [BUILD_DIR]     (default build/)
# Environment: STEPS (10, the first 2 untimed), WORLDS ("1 2 3": process counts, each dividing 12),
# LOOM_BENCH_ARGS (more loom-train flags for every run, e.g. --ckpt.stop_file=/tmp/stop: a run that
# polls a stop file, as InternLM's configs do).
# On a machine with fewer cores than processes the figures show the cost of oversubscription, not
# scaling: the section records the core count and the load.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
W=$(mktemp -d /tmp/loom_dist_bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
STEPS=${STEPS:-10} GLOBAL=12
read -r -a WORLDS <<< "${WORLDS:-1 2 3}"
LOG=${LOOM_BENCH_LOG:-bench/history/log.md}
read -r -a EXTRA <<< "${LOOM_BENCH_ARGS:-}"

"$B/tokenize/loom-tokenize" --model data_samples/spm_2k.model --output-dir "$W/tok" data_samples/neko_head.jsonl.gz 2>/dev/null
"$B/packer/loom-pack" pack --seq-len 256 --strategy bestfit --seed 1 --output-dir "$W/data/train/neko" "$W/tok/neko_head.bin" 2>/dev/null

run() {  # world zero1 -> tokens/s of steps 3.. (rank 0's metrics: tokens of all ranks / step time)
  local world=$1 zero1=$2 port pids=()
  # A port the kernel says is free now (not a fixed one, which another job may hold).
  port=$(/usr/bin/python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  for r in $(seq 0 $((world - 1))); do
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$B/trainer/loom-train" --config configs/demo.ini --job.run_dir="$W/run_${world}_$zero1" \
      --data.train_folder="$W/data/train" --data.valid_folder "" --data.total_steps="$STEPS" \
      --data.micro_bsz=$((GLOBAL / world)) --data.micro_num=1 --parallel.zero1="$zero1" --job.threads=1 \
      --job.log_every=1 --ckpt.enable_save_ckpt=false --job.tensorboard=false --monitor.startup_probe=false \
      ${EXTRA[@]+"${EXTRA[@]}"} 2>/dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  /usr/bin/python3 -c "
import json
r=[json.loads(l) for l in open('$W/run_${world}_$zero1/metrics.jsonl') if '\"loss\"' in l][2:]
print('%.1f' % (sum(x['tokens_per_s']*x['step_time'] for x in r)/sum(x['step_time'] for x in r)))"
}

declare -A T
for w in "${WORLDS[@]}"; do
  for z in 1 -1; do T[$w,$z]=$(run $w $z); echo "W=$w zero1=$z: ${T[$w,$z]} tokens/s"; done
done
{
  echo
  echo "## loom-train data parallel on CPU (Gloo, loopback), $(date -u +%Y-%m-%d)"
  echo
  echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load avg $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- git commit: $(git rev-parse --short HEAD)"
  echo "- command: STEPS=$STEPS WORLDS=\"${WORLDS[*]}\"${LOOM_BENCH_ARGS:+ LOOM_BENCH_ARGS=\"$LOOM_BENCH_ARGS\"} bash bench/dist_bench.sh $B"
  echo "- model: configs/demo.ini (hidden 128, 2 layers, vocab 2000), seq 256, global batch $GLOBAL packs, 1 thread per process, $STEPS steps (first 2 excluded)"
  echo
  echo "| processes | replicated tokens/s | ZeRO-1 tokens/s | replicated / W=${WORLDS[0]} |"
  echo "| ---: | ---: | ---: | ---: |"
  for w in "${WORLDS[@]}"; do
    echo "| $w | ${T[$w,1]} | ${T[$w,-1]} | $(/usr/bin/python3 -c "print('%.2fx' % (${T[$w,1]} / ${T[${WORLDS[0]},1]}))") |"
  done
} >> "$LOG"
