#!/usr/bin/env bash
# scripts/pipeline.mk over many tiny inputs at the default VALID_FRACTION (0.05) and MIN_VALID_DOCS=0:
# most splits leave the valid side empty (no shard written for it). The run still goes through: the packs take the
# sides that exist, a dataset without a valid document is not validated, a second make has nothing
# to do, and an input that loses its valid documents takes its old valid shard and packs with it.
# A dataset left without a training document is refused, naming it.
# Then at the default MIN_VALID_DOCS (1): every input of two or more documents gives validation one.
# usage: pipeline_small_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
mkdir -p "$BUILD/test_tmp"
T=$(mktemp -d "$BUILD/test_tmp/pipeline_small.XXXXXX")
[ -n "${LOOM_KEEP_TMP:-}" ] || trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Dataset tiny: 40 inputs of 1 to 3 lines (a line is a document) and one of 40 lines; dataset few:
# one input of 2 lines. At SEED 1 the first document index that goes to valid is 29, so only
# tiny/long has valid documents.
mkdir -p "$T/data/tiny" "$T/data/few"
seq 1 200 | sed 's/^/line /' > "$T/lines.txt"
for i in $(seq 1 40); do sed -n "${i},$((i + i % 3))p" "$T/lines.txt" > "$T/data/tiny/f$i.txt"; done
head -n 40 "$T/lines.txt" > "$T/data/tiny/long.txt"
head -n 2 "$T/lines.txt" > "$T/data/few/x.txt"
cat > "$T/tiny.ini" <<'INI'
[job]
threads = 1
tensorboard = false
[data]
seq_len = 999
micro_bsz = 2
micro_num = 1
total_steps = 2
[model]
hidden_size = 32
num_layers = 1
num_attention_heads = 2
vocab_size = 2000
[ckpt]
checkpoint_every = 2
INI
M=(make --no-print-directory -j 2 -f "$SRC/scripts/pipeline.mk" BIN="$BUILD" MODEL="$SRC/data_samples/spm_2k.model"
   INPUT_DIR="$T/data" OUT="$T/out" CONFIG="$T/tiny.ini" SEQ_LEN=32 MIN_VALID_DOCS=0)

# 1. From nothing: every stage, though 41 of 42 splits have no valid side.
"${M[@]}" > "$T/make1.log" 2>&1 || { tail -20 "$T/make1.log"; fail "first make"; }
[ -e "$T/out/split/tiny/valid/long.bin.meta" ] || fail "long.txt has no valid shard"
[ "$(ls "$T/out/split/tiny/valid")" = "$(printf 'long.bin\nlong.bin.meta')" ] ||
  fail "valid shards other than long's: $(ls "$T/out/split/tiny/valid")"
[ "$(ls "$T/out/split/tiny/train" | grep -c '\.bin$')" = 41 ] || fail "not 41 train shards in tiny"
for f in packed/train/tiny/packed.bin.meta packed/train/few/packed.bin.meta packed/valid/tiny/packed.bin.meta \
         run/checkpoints/step_2; do
  [ -e "$T/out/$f" ] || fail "first make did not write $f"
done
[ ! -e "$T/out/packed/valid/few" ] || fail "dataset few has valid packs"
grep -q "dataset few: no validation document" "$T/make1.log" || fail "no word that dataset few is not validated"
grep -q "valid set 'tiny'" "$T/make1.log" || fail "no valid set tiny"
grep -q '"val/tiny_loss"' "$T/out/run/metrics.jsonl" || fail "dataset tiny was not validated"
! grep -q '"val/few_loss"' "$T/out/run/metrics.jsonl" || fail "dataset few was validated"

# 2. Nothing changed: nothing to do.
"${M[@]}" -q || fail "a second make would run something: $("${M[@]}" -n)"

# 3. long.txt shrinks below document 29: its split removes its valid shard, tiny's valid packs go,
# and training runs without a valid folder (no dataset has validation documents left).
head -n 10 "$T/lines.txt" > "$T/data/tiny/long.txt"
"${M[@]}" > "$T/make3.log" 2>&1 || { tail -20 "$T/make3.log"; fail "make after long.txt shrank"; }
[ ! -e "$T/out/split/tiny/valid/long.bin" ] && [ ! -e "$T/out/split/tiny/valid/long.bin.meta" ] ||
  fail "long's old valid shard is still there"
[ ! -e "$T/out/packed/valid/tiny/packed.bin" ] && [ ! -e "$T/out/packed/valid/tiny/packed.bin.meta" ] ||
  fail "tiny's old valid packs are still there"
! grep -q "valid_folder = \|valid set '" "$T/make3.log" || fail "loom-train still got a valid folder"
"${M[@]}" -q || fail "make after the change would run something: $("${M[@]}" -n)"

# 4. Every document to valid: dataset few has no training document, and make says so.
! "${M[@]}" OUT="$T/out_all_valid" VALID_FRACTION=1 pack > "$T/make4.log" 2>&1 || fail "a dataset without training data packed"
grep -q "dataset [a-z]*: no training document" "$T/make4.log" || fail "the refusal does not say why: $(tail -3 "$T/make4.log")"

# 5. The default MIN_VALID_DOCS=1: inputs of 2 or 3 lines give one document to valid and keep the
# rest for training; an input of one line stays all train.
"${M[@]}" OUT="$T/out_min" MIN_VALID_DOCS=1 pack > "$T/make5.log" 2>&1 || { tail -20 "$T/make5.log"; fail "make at MIN_VALID_DOCS=1"; }
for i in $(seq 1 40); do
  v="$T/out_min/split/tiny/valid/f$i.bin"
  if [ $((i % 3)) = 0 ]; then [ ! -e "$v" ] || fail "f$i (one line) has a valid shard"
  else [ -e "$v" ] && [ -e "$T/out_min/split/tiny/train/f$i.bin" ] || fail "f$i ($((1 + i % 3)) lines) lacks a side"; fi
done
[ -e "$T/out_min/packed/valid/few/packed.bin.meta" ] || fail "dataset few has no valid packs at MIN_VALID_DOCS=1"
! grep -q "^dataset [a-z]*: no validation document" "$T/make5.log" || fail "a dataset is still not validated: $(grep "^dataset" "$T/make5.log")"
echo OK
