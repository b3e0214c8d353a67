#!/usr/bin/env bash
# Prepares what bench/hf/check_logits.py compares, on the CPU machine: an export-hf folder of a loom
# checkpoint and loom's own logits and greedy tokens for a fixed prompt (generate --dump-logits),
# once from the checkpoint and once from the exported folder (the two dumps must be identical:
# export -> import is bitwise). The folder it writes travels to the device with the working tree.
#
# usage: bench/hf/make_fixture.sh CHECKPOINT TOKENIZER [OUT=bench/hf/fixture] [BUILD=build]
set -euo pipefail
cd "$(dirname "$0")/../.."
ckpt=$1
tokenizer=$2
out=${3:-bench/hf/fixture}
build=${4:-build}
train=$build/trainer/loom-train
prompt=${LOOM_HF_PROMPT:-"It was a fine day, and the"}
new=${LOOM_HF_NEW_TOKENS:-32}

mkdir -p "$out"
"$train" export-hf --checkpoint "$ckpt" --output "$out/hf" --tokenizer "$tokenizer"
"$train" generate --checkpoint "$ckpt" --tokenizer "$tokenizer" --prompt "$prompt" \
  --max-new-tokens "$new" --dump-logits "$out/dump_checkpoint.safetensors"
"$train" generate --hf "$out/hf" --prompt "$prompt" --max-new-tokens "$new" \
  --dump-logits "$out/dump.safetensors"
cmp "$out/dump_checkpoint.safetensors" "$out/dump.safetensors"
echo "fixture in $out: $(du -sh "$out" | cut -f1); the dumps from the checkpoint and from its export are identical"
echo "on the device: python3 bench/hf/check_logits.py --hf $out/hf --dump $out/dump.safetensors"
