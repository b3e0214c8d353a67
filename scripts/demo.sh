#!/usr/bin/env bash
# The whole pipeline on data_samples/, end to end, in a few minutes on 2 cores:
#   tokenize -> verify -> split -> pack -> train (eval + checkpoints) -> generate a sample.
# Outputs go to out/demo/ (removed first, so the demo is repeatable). Usage: bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
BIN=build
OUT=out/demo
rm -rf "$OUT"
mkdir -p "$OUT"
MODEL=data_samples/spm_2k.model

echo "== 1. tokenize: txt, json and jsonl.gz into token shards"
$BIN/tokenize/loom-tokenize --model $MODEL --output-dir $OUT/tokens \
  data_samples/botchan_head.txt data_samples/botchan_tail.json data_samples/neko_head.jsonl.gz

echo "== 2. verify every shard (deep: ids < vocab and checksums)"
$BIN/packer/loom-pack verify --deep $OUT/tokens

echo "== 3. a deterministic train/valid split by document"
$BIN/packer/loom-pack split --valid-fraction 0.05 --seed 1 --output-dir $OUT/split $OUT/tokens/*.bin
$BIN/packer/loom-pack stats $OUT/split/train

echo "== 4. pack into 256-token sequences that keep document boundaries"
$BIN/packer/loom-pack pack --seq-len 256 --strategy bestfit --seed 1 --output-dir $OUT/packed/train/samples $OUT/split/train/*.bin
$BIN/packer/loom-pack pack --seq-len 256 --strategy bestfit --seed 1 --output-dir $OUT/packed/valid/samples $OUT/split/valid/*.bin
$BIN/packer/loom-pack verify --deep $OUT/packed

echo "== 5. train a tiny InternLM-architecture model (eval and checkpoints included)"
$BIN/trainer/loom-train --config configs/demo.ini \
  --data.train_folder=$OUT/packed/train --data.valid_folder=$OUT/packed/valid --job.run_dir=$OUT/run

echo "== 6. generate a sample from the newest checkpoint (sampled: temperature 0.8, top-p 0.9)"
# Greedy decoding of a model this small repeats its likeliest piece ("sss sss ..."); sampling reads
# more like its training text. --temperature 0 gives the greedy continuation.
$BIN/trainer/loom-train generate --checkpoint $OUT/run/checkpoints --tokenizer $MODEL \
  --prompt "It was a fine day, and the" --max-new-tokens 48 --temperature 0.8 --top-p 0.9 --seed 1

echo "== 7. where the run's figures are"
echo "metrics (one JSON record per step): $OUT/run/metrics.jsonl"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 scripts/plot_metrics.py $OUT/run/metrics.jsonl $OUT/run/metrics.png
  echo "loss and learning-rate plot:        $OUT/run/metrics.png"
else
  echo "loss plot: needs Debian's python3-matplotlib (scripts/setup.sh installs it), then"
  echo "  /usr/bin/python3 scripts/plot_metrics.py $OUT/run/metrics.jsonl $OUT/run/metrics.png"
fi
echo "TensorBoard event files:             $OUT/run/tensorboard  (tensorboard --logdir $OUT/run/tensorboard)"
