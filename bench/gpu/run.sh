#!/usr/bin/env bash
# The GPU benchmark, run on the GPU machine (scripts/device/run.sh calls it): HF transformers'
# LlamaForCausalLM in eager / SDPA / torch.compile modes, and loom-train, on the ~1B and 7B
# presets with the same micro-batch and sequence length. One JSON line per run in OUT/bench.jsonl.
# Usage: bash bench/gpu/run.sh OUT_DIR   (LOOM_BENCH_SYSTEMS="hf loom", LOOM_BENCH_PRESETS="1b 7b"
# and LOOM_BENCH_MODES="eager sdpa compile" pick what runs)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: bench/gpu/run.sh OUT_DIR}
SYSTEMS=${LOOM_BENCH_SYSTEMS:-"hf loom"}
JSONL="$OUT/bench.jsonl"
# Presets: name, micro-batch, activation checkpointing (the 7B shape needs it on one GPU).
PRESETS=("1b 2 0" "7b 1 1")
WANT=${LOOM_BENCH_PRESETS:-"1b 7b"}
MODES=${LOOM_BENCH_MODES:-"eager sdpa compile"}

hf() {  # preset bsz ckpt mode
  local extra=""
  [ "$3" = 1 ] && extra="--checkpoint"
  echo "== hf $1 $4 bsz $2 ckpt $3" >&2
  timeout 300 python3 bench/gpu/hf_llama.py --preset "$1" --mode "$4" --micro-bsz "$2" --steps 6 --warmup 3 $extra \
    >> "$JSONL" || echo "{\"system\": \"hf-transformers\", \"preset\": \"$1\", \"mode\": \"$4\", \"error\": \"exit $?\"}" >> "$JSONL"
}

for p in "${PRESETS[@]}"; do
  # shellcheck disable=SC2086  # a preset is its words
  set -- $p
  [[ " $WANT " == *" $1 "* ]] || continue
  if [[ " $SYSTEMS " == *" hf "* ]]; then
    for mode in $MODES; do hf "$1" "$2" "$3" "$mode"; done
  fi
  if [[ " $SYSTEMS " == *" loom "* ]] && [ -x bench/gpu/loom_train.sh ]; then
    echo "== loom $1 bsz $2 ckpt $3" >&2
    bash bench/gpu/loom_train.sh "$1" "$2" "$3" "$OUT" >> "$JSONL" ||
      echo "{\"system\": \"loom\", \"preset\": \"$1\", \"error\": \"exit $?\"}" >> "$JSONL"
  fi
done
