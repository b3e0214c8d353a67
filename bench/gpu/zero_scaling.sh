#!/usr/bin/env bash
# For a machine with several GPUs (none is lent yet): weak scaling of loom-train and the equivalence
# of ZeRO stages across GPUs, in one call after scripts/device/build.sh.
#   scaling: the 1b preset at micro_bsz 4 per GPU on W = 1, 2, 4, 8 GPUs (as many as there are),
#     replicated and at ZeRO stages 1-3 over all ranks: tokens/s per GPU (tgs), MFU, peak memory,
#     and the efficiency tokens/s(W) / (W * tokens/s(1)) of each mode;
#   equivalence: the demo shape (configs/demo.ini) on random data with the global batch fixed at 8
#     packs, 20 steps at W = 1 replicated and at W = 2/4/8 for each stage: the largest relative
#     difference of the losses to W = 1's (bf16: expect ~1e-2; fp32 with --model.dtype=float32 ~1e-5).
# Launch: torchrun (scripts/launch/torchrun.sh) with the image's python; each rank takes the GPU of
# its LOCAL_RANK (job.device=cuda). Usage: bash bench/gpu/zero_scaling.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: bench/gpu/zero_scaling.sh OUT_DIR}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHRUN="python3 -m torch.distributed.run"
BIN=build-gpu/trainer/loom-train
NGPU=$(nvidia-smi -L | wc -l)
W=$(mktemp -d /tmp/loom-scaling-XXXX)
mkdir -p "$W/train/synthetic" "$W/small/synthetic"
python3 bench/gpu/make_packed.py "$W/train/synthetic/part0.bin" --seq-len 4096 --packs 512 >&2
python3 bench/gpu/make_packed.py "$W/small/synthetic/part0.bin" --seq-len 256 --packs 400 --vocab 2000 >&2

modes() { echo "replicated:--parallel.zero1=1 z1:--parallel.zero1=-1,--parallel.zero_stage=1 z2:--parallel.zero1=-1,--parallel.zero_stage=2 z3:--parallel.zero1=-1,--parallel.zero_stage=3"; }
for world in 1 2 4 8; do
  [ "$world" -le "$NGPU" ] || continue
  for m in $(modes); do
    name=${m%%:*} flags=${m#*:}
    run="$W/scale_${world}_$name"
    # shellcheck disable=SC2086  # flags: a list
    timeout 600 bash scripts/launch/torchrun.sh "$world" $BIN --job.run_dir="$run" --job.device=cuda \
      --model.dtype=bfloat16 --job.peak_tflops=989 --job.tensorboard=false --ckpt.enable_save_ckpt=false \
      --job.log_every=1 --data.train_folder="$W/train" --data.seq_len=4096 --data.micro_bsz=4 --data.micro_num=1 \
      --data.total_steps=12 --model.vocab_size=103168 --model.hidden_size=2048 --model.num_layers=24 \
      --model.num_attention_heads=16 --model.checkpoint=0 ${flags//,/ } > "$OUT/scale_${world}_$name.log" 2>&1
    python3 - "$run/metrics.jsonl" "$world" "$name" <<'PY' | tee -a "$OUT/scaling.jsonl"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l][4:]
tok = sum(r["tokens_per_s"] for r in rows) / len(rows)
print(json.dumps(dict(world=int(sys.argv[2]), mode=sys.argv[3], tokens_per_s=round(tok), tgs=round(tok / int(sys.argv[2])),
                      mfu=round(sum(r["mfu"] for r in rows) / len(rows), 4),
                      peak_gib=round(max(r["peak_memory_mb"] for r in rows) / 1024, 2))))
PY
  done
done
python3 - "$OUT/scaling.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
one = {r["mode"]: r["tokens_per_s"] for r in rows if r["world"] == 1}
for r in rows:
    if r["mode"] in one:
        print(f'{r["mode"]:>10} W={r["world"]}: {r["tgs"]} tgs, efficiency {r["tokens_per_s"] / (r["world"] * one[r["mode"]]):.3f}')
PY

# Equivalence: global batch 8 packs of 256 tokens at every W.
for world in 1 2 4 8; do
  [ "$world" -le "$NGPU" ] || continue
  for m in $(modes); do
    name=${m%%:*} flags=${m#*:}
    [ "$world" = 1 ] && [ "$name" != replicated ] && continue
    # shellcheck disable=SC2086  # flags: a list
    timeout 300 bash scripts/launch/torchrun.sh "$world" $BIN --config configs/demo.ini --job.device=cuda \
      --job.run_dir="$W/eq_${world}_$name" --job.tensorboard=false --ckpt.enable_save_ckpt=false --job.log_every=1 \
      --data.train_folder="$W/small" --data.valid_folder= --data.seq_len=256 --data.micro_bsz=$((8 / world)) \
      --data.micro_num=1 --data.total_steps=20 --model.dropout=0 --model.vocab_size=2000 ${flags//,/ } \
      > "$OUT/eq_${world}_$name.log" 2>&1
  done
done
python3 - "$W" <<'PY' | tee "$OUT/equivalence.txt"
import glob, json, os, sys
loss = lambda d: [json.loads(l)["loss"] for l in open(os.path.join(d, "metrics.jsonl")) if '"loss"' in l]
ref = loss(os.path.join(sys.argv[1], "eq_1_replicated"))
for d in sorted(glob.glob(os.path.join(sys.argv[1], "eq_*"))):
    got = loss(d)
    diff = max(abs(a - b) / abs(b) for a, b in zip(got, ref)) if len(got) == len(ref) else float("nan")
    print(f"{os.path.basename(d)}: {len(got)} steps, largest relative loss difference to W=1 replicated {diff:.2e}")
PY
rm -rf "$W"
