#!/usr/bin/env bash
# The whole pipeline on data_samples/, end to end, in under a minute on 2 idle cores (plus the build
# of the three tools alone; scripts/test.sh builds the tests):
#   train a tokenizer -> tokenize -> verify -> split -> pack -> train (eval + checkpoints)
#   -> continue a prompt.
# The model trains on the English text (Botchan) so that its sample reads as English words; the
# Japanese jsonl.gz is tokenized and verified with data_samples' multilingual model to show that reader.
# Outputs go to out/demo/ (removed first, so the demo is repeatable). Usage: bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_BUILD_TARGETS="loom-tokenize loom-pack loom-train" bash scripts/build.sh
BIN=build
OUT=out/demo
rm -rf "$OUT"
mkdir -p "$OUT"
MODEL=$OUT/spm_en_2k.model
ENGLISH="data_samples/botchan_head.txt data_samples/botchan_tail.json"

echo "== 1. train a SentencePiece model of 2,000 pieces on the English text (txt and json)"
$BIN/tokenize/loom-tokenize train-spm --vocab-size 2000 --normalization identity --threads 2 \
  --model-prefix $OUT/spm_en_2k $ENGLISH

echo "== 2. tokenize: txt and json with it; the Japanese jsonl.gz with data_samples' multilingual model"
$BIN/tokenize/loom-tokenize --model $MODEL --output-dir $OUT/tokens $ENGLISH
$BIN/tokenize/loom-tokenize --model data_samples/spm_2k.model --output-dir $OUT/tokens_ja data_samples/neko_head.jsonl.gz

echo "== 3. verify every shard (deep: ids < vocab and checksums)"
$BIN/packer/loom-pack verify --deep $OUT/tokens $OUT/tokens_ja

echo "== 4. a deterministic train/valid split by document"
$BIN/packer/loom-pack split --valid-fraction 0.05 --seed 1 --output-dir $OUT/split $OUT/tokens/*.bin
$BIN/packer/loom-pack stats $OUT/split/train

echo "== 5. pack into 256-token sequences that keep document boundaries"
for side in train valid; do
  $BIN/packer/loom-pack pack --seq-len 256 --strategy bestfit --seed 1 --output-dir $OUT/packed/$side/botchan \
    $OUT/split/$side/*.bin
done
$BIN/packer/loom-pack verify --deep $OUT/packed

echo "== 6. train a tiny InternLM-architecture model (eval and checkpoints included; configs/demo.ini)"
# data.tokenizer: checked against the shards' fingerprint and copied into every checkpoint, so
# generate below needs no --tokenizer.
$BIN/trainer/loom-train --config configs/demo.ini --data.tokenizer=$MODEL \
  --data.train_folder=$OUT/packed/train --data.valid_folder=$OUT/packed/valid --job.run_dir=$OUT/run

echo "== 7. where the run's figures are"
echo "metrics, one JSON record per logged step: $OUT/run/metrics.jsonl"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 scripts/plot_metrics.py $OUT/run/metrics.jsonl $OUT/run/metrics.png
  echo "loss and learning-rate plot (PNG):      $OUT/run/metrics.png"
else
  echo "loss plot: needs Debian's python3-matplotlib (scripts/setup.sh installs it), then"
  echo "  /usr/bin/python3 scripts/plot_metrics.py $OUT/run/metrics.jsonl $OUT/run/metrics.png"
fi
echo "TensorBoard event files:                $OUT/run/tensorboard  (tensorboard --logdir $OUT/run/tensorboard)"

echo "== 8. continue a prompt with the newest checkpoint (sampled: temperature 0.7, top-p 0.9, seed 1)"
# Greedy decoding (--temperature 0) of a model this small repeats its likeliest pieces; sampling
# from the most likely 90% of the probability reads like its training text.
$BIN/trainer/loom-train generate --checkpoint $OUT/run/checkpoints \
  --prompt "It was a fine day, and the" --max-new-tokens 64 --temperature 0.7 --top-p 0.9 --seed 1
