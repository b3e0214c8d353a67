#!/usr/bin/env bash
# ZeRO stages on one GPU over NCCL (one rank with a named backend creates the process group, so
# every collective runs through NCCL), and the compute time of one InternLM-20B layer:
#   stages: the 1b preset (bench/gpu/loom_train.sh) replicated and at parallel.zero_stage 1, 2, 3
#     (parallel.zero1=-1): tokens/s, peak memory, final loss of each, same data and seed;
#   trace: a --profiling run of stage 3, summarised (bench/gpu/trace_summary.py): the gathers on
#     NCCL's stream beside the layers' kernels;
#   layer20b: fwd+bwd seconds of one layer of configs/internlm_20b.ini's shape (hidden 5120, 40
#     heads, seq 2048), from two runs with 1 and 3 layers (the difference over 2 layers), for the
#     bandwidth table of docs/DISTRIBUTED.md.
# Run on the GPU machine after scripts/device/build.sh. Usage: bench/gpu/zero_stages.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: bench/gpu/zero_stages.sh OUT_DIR}
mkdir -p "$OUT"
export LOOM_BENCH_STEPS=${LOOM_BENCH_STEPS:-10}
for z in replicated 1 2 3; do
  if [ "$z" = replicated ]; then extra="--parallel.backend=nccl --parallel.zero1=1"
  else extra="--parallel.backend=nccl --parallel.zero1=-1 --parallel.zero_stage=$z"; fi
  echo "== 1b bsz 4 ckpt 0 $extra"
  LOOM_TRAIN_EXTRA="$extra" timeout 110 bash bench/gpu/loom_train.sh 1b 4 0 "$OUT" || echo "stage $z failed"
  cp "$OUT/loom_1b.log" "$OUT/loom_1b_zero_$z.log" 2>/dev/null
done
echo "== 1b stage 3 profiled (5 steps)"
LOOM_BENCH_STEPS=5 LOOM_TRAIN_EXTRA="--parallel.backend=nccl --parallel.zero1=-1 --parallel.zero_stage=3 --profiling" \
  timeout 100 bash bench/gpu/loom_train.sh 1b 4 0 "$OUT" > /dev/null || echo "profiled run failed"
[ -f "$OUT/trace_1b.txt" ] && cp "$OUT/trace_1b.txt" "$OUT/trace_1b_zero3.txt"
for n in 1 3; do
  W=$(mktemp -d /tmp/loom-layer-XXXX)
  mkdir -p "$W/train/synthetic"
  python3 bench/gpu/make_packed.py "$W/train/synthetic/part0.bin" --seq-len 2048 --packs 40 >&2
  timeout 120 build-gpu/trainer/loom-train --config configs/internlm_20b.ini --job.run_dir="$W/run" --job.device=cuda \
    --job.tensorboard=false --ckpt.enable_save_ckpt=false --job.log_every=1 --data.train_folder="$W/train" \
    --data.valid_folder= --data.micro_num=1 --data.micro_bsz=1 --data.total_steps=6 --model.num_layers=$n \
    --model.checkpoint=0 --job.peak_tflops=989 > "$OUT/layer20b_$n.log" 2>&1 || echo "20b layers=$n failed"
  python3 - "$W/run/metrics.jsonl" "$n" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"fwd_bwd_time\"" in l][2:]
print(json.dumps(dict(layers=int(sys.argv[2]), fwd_bwd_s=sum(r["fwd_bwd_time"] for r in rows) / len(rows),
                      step_s=sum(r["step_time"] for r in rows) / len(rows))))
PY
  rm -rf "$W"
done
