#!/usr/bin/env bash
# GPU-side checks, run on the GPU machine after scripts/device/build.sh:
#   nccl: loom-train's NCCL path end to end with one rank (a named backend makes a single rank
#     create the process group): configs/demo.ini's shape on CUDA, a 30-step run stopped after step
#     20 (debug.stop_at_step, as SIGTERM) with replicated AdamW (parallel.zero1=-1 = shards over
#     every rank = 1 here) and with zero1=1, each resumed from its checkpoint (--resume auto) to 30
#     steps; steps 21-30 are compared with an uninterrupted 30-step run's.
#   hf: bench/hf/check_logits.py as docs/HF.md describes: on the carried bench/hf/fixture (if
#     present) and on an export of the zero1=-1 run's checkpoint.
# Data: bench/gpu/make_packed.py (random ids), validation every 10 steps, checkpoints every 10.
# Usage: [LOOM_CHECK_DEVICE=cuda:0] bash bench/gpu/checks.sh OUT_DIR   (logs: OUT_DIR/nccl_resume.log, OUT_DIR/hf_logits.log)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: bench/gpu/checks.sh OUT_DIR}
BIN=build-gpu/trainer/loom-train
DEV=${LOOM_CHECK_DEVICE:-cuda}  # job.device of the NCCL runs
W=$(mktemp -d /tmp/loom-checks-XXXX)
mkdir -p "$W/train/synthetic"
mkdir -p "$W/valid/synthetic"
python3 bench/gpu/make_packed.py "$W/train/synthetic/part0.bin" --seq-len 256 --packs 400 --vocab 2000
python3 bench/gpu/make_packed.py "$W/valid/synthetic/part0.bin" --seq-len 256 --packs 24 --vocab 2000 --seed 1

train() {  # run_dir zero1 total_steps [extra...]
  local dir=$1 z=$2 n=$3
  shift 3
  echo "== loom-train job.device=$DEV run_dir=$dir parallel.backend=nccl parallel.zero1=$z total_steps=$n $*"
  $BIN --config configs/demo.ini --job.device="$DEV" --job.run_dir="$dir" --job.log_every=5 --job.tensorboard=false \
    --data.train_folder="$W/train" --data.valid_folder="$W/valid" --data.valid_every=10 --data.total_steps="$n" \
    --ckpt.checkpoint_every=10 --parallel.backend=nccl --parallel.zero1="$z" "$@" 2>&1 |
    grep -E "WARN|ERROR|error|backend|resum|checkpoint|INFO step |valid|done:|zero|ZeRO|nccl|NCCL" |
    sed -E 's/ (acc|perplexity|inf_nan_skip_batches|skip_batches|skipped_this_step|tgs|tflops|mfu|data_time|fwd_bwd_time|optimizer_time|peak_reserved_mb|plex\/[a-z]+|acc\/[a-z]+)=[^ ]*//g' | cut -c1-400
  local rc=${PIPESTATUS[0]}
  echo "exit $rc"
  return 0
}

{
  for z in -1 1; do
    d="$W/run_z$z"
    train "$d" "$z" 30 --debug.stop_at_step=20  # stops as on SIGTERM: saves step_20
    train "$d" "$z" 30 --resume auto
    ls "$d/checkpoints" 2>&1
    train "$W/straight_z$z" "$z" 30
    echo "== steps 21-30: resumed run vs uninterrupted run (zero1=$z)"
    python3 - "$d/metrics.jsonl" "$W/straight_z$z/metrics.jsonl" <<'PY'
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and r["step"] > 20}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
for s in sorted(b):
    print("step %d resumed %.9f uninterrupted %.9f %s" % (s, a.get(s, float("nan")), b[s], "equal" if a.get(s) == b[s] else "DIFFERENT"))
print("resume exact:", a == b and len(b) > 0)
PY
  done
} > "$OUT/nccl_resume.log" 2>&1

{
  echo "== check_logits on the carried fixture (demo step_120, spm_2k)"
  if [ -f bench/hf/fixture/dump.safetensors ]; then
    python3 bench/hf/check_logits.py --hf bench/hf/fixture/hf --dump bench/hf/fixture/dump.safetensors --device cuda
    echo "exit $?"
  else
    echo "no bench/hf/fixture here (not carried)"
  fi
  echo "== check_logits on an export of the NCCL zero1=-1 run (random-id data, vocab 2000)"
  ck="$W/run_z-1/checkpoints"
  F="$W/fixture"
  ids=$(python3 -c "import sys, sentencepiece as s; p = s.SentencePieceProcessor(model_file=sys.argv[1]); print(','.join(map(str, [p.bos_id()] + p.encode(sys.argv[2]))))" \
    data_samples/spm_2k.model "It was a fine day, and the")
  echo "prompt ids $ids"
  $BIN export-hf --checkpoint "$ck" --output "$F/hf" --tokenizer data_samples/spm_2k.model 2>&1 | tail -3 &&
    $BIN generate --checkpoint "$ck" --tokenizer data_samples/spm_2k.model --prompt-ids "$ids" --max-new-tokens 32 \
      --dump-logits "$F/dump.safetensors" 2>&1 | tail -3 &&
    python3 bench/hf/check_logits.py --hf "$F/hf" --dump "$F/dump.safetensors" --device cuda
  echo "exit $?"
} > "$OUT/hf_logits.log" 2>&1
rm -rf "$W"
