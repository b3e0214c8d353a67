#!/usr/bin/env bash
# A/B of loom-train against an older commit, on the GPU machine, in one device call: the older
# source arrives as build-base/src.tar (here: `mkdir -p build-base && git archive BASE > build-base/src.tar`,
# then carry ["build-base", ".debs"]); it is built beside the working tree, and each run spec goes
# through each tree's own bench/gpu/loom_train.sh. One JSON line per run in OUT/ab.jsonl, with
# "tree": "base" or "current" and the spec.
# Usage: bash bench/gpu/ab_base.sh OUT "PRESET:MICRO_BSZ:CKPT[:EXTRA FLAGS] ..."   (LOOM_AB_TREES="base current")
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: bench/gpu/ab_base.sh OUT SPECS}
SPECS=${2:?usage: bench/gpu/ab_base.sh OUT SPECS}
TREES=${LOOM_AB_TREES:-"base current"}
ROOT=$PWD
BASE=/tmp/loom-base
export LD_LIBRARY_PATH="/tmp/loom-prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

build_tree() {  # dir name
  local t0
  t0=$(date +%s)
  (cd "$1" && LOOM_TARGETS=loom-train timeout 420 bash scripts/device/build.sh) > "$OUT/build_$2.log" 2>&1
  echo "build $2 rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/ab.txt"
}

for tree in $TREES; do
  if [ "$tree" = base ]; then
    [ -f build-base/src.tar ] || { echo "no build-base/src.tar" | tee -a "$OUT/ab.txt"; continue; }
    rm -rf "$BASE" && mkdir -p "$BASE" && tar -xf build-base/src.tar -C "$BASE" && ln -s "$ROOT/.debs" "$BASE/.debs"
    build_tree "$BASE" base
  else
    build_tree "$ROOT" current
  fi
done

# Both trees train on the same packs: LOOM_BENCH_DATA, else packs made once per spec with this
# tree's loom-tokenize and loom-pack (the base is built with loom-train alone, and the device's
# Python sentencepiece cannot load the tokenizer the packs need).
PACKS=$(mktemp -d /tmp/loom-ab-packs-XXXX)
for spec in $SPECS; do
  IFS=: read -r preset bsz ckpt extra <<< "$spec"
  data=${LOOM_BENCH_DATA:-}
  if [ -z "$data" ]; then
    data=$PACKS/${preset}_$bsz.bin
    [ -f "$data" ] || python3 bench/gpu/make_packed.py "$data" --seq-len "${LOOM_BENCH_SEQ_LEN:-4096}" \
      --packs $(( bsz * ${LOOM_BENCH_MICRO_NUM:-1} * (${LOOM_BENCH_STEPS:-10} + 2) )) --docs "${LOOM_BENCH_DOCS:-random}" \
      --tools build-gpu >> "$OUT/ab.txt" 2>&1
  fi
  for tree in $TREES; do
    dir=$ROOT; [ "$tree" = base ] && dir=$BASE
    [ -x "$dir/build-gpu/trainer/loom-train" ] || continue
    line=$(cd "$dir" && LOOM_BENCH_DATA=$data LOOM_TRAIN_EXTRA="${extra//,/ }" timeout 300 \
           bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$OUT" 2>>"$OUT/ab.txt")
    [ -n "$line" ] || line="{\"preset\": \"$preset\", \"error\": \"failed\"}"
    echo "${line%\}}, \"tree\": \"$tree\", \"extra\": \"$extra\"}" | tee -a "$OUT/ab.jsonl"
  done
done
