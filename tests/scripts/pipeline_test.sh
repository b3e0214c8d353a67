#!/usr/bin/env bash
# scripts/pipeline.mk over a folder of inputs, with a tiny model: the first make builds every stage
# down to the final checkpoint; a second make has nothing to do; touching one input re-tokenizes
# only that input and training resumes from the run's checkpoint (more STEPS: it continues, the first
# run's metrics kept); a new SEQ_LEN repacks. The inputs directly in the folder and those of its
# sub-folder are two datasets (all, sub), mixed 1:3 in every batch and validated apart.
# usage: pipeline_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
mkdir -p "$BUILD/test_tmp"
T=$(mktemp -d "$BUILD/test_tmp/pipeline.XXXXXX")
[ -n "${LOOM_KEEP_TMP:-}" ] || trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$T/data/sub"
head -n 150 "$SRC/data_samples/botchan_head.txt" > "$T/data/a.txt"
cp "$SRC/data_samples/botchan_tail.json" "$T/data/sub/b.json"
(zcat "$SRC/data_samples/neko_head.jsonl.gz" || true) | head -n 60 | gzip > "$T/data/sub/c.jsonl.gz"
echo "not an input" > "$T/data/sub/notes.md"
cat > "$T/tiny.ini" <<'INI'
[job]
threads = 1
log_every = 1
tensorboard = false
[data]
seq_len = 999
micro_bsz = 2
micro_num = 1
total_steps = 4
[lr_scheduler]
kind = wsd
[model]
hidden_size = 32
num_layers = 1
num_attention_heads = 2
vocab_size = 2000
[ckpt]
checkpoint_every = 2
INI
M=(make --no-print-directory -f "$SRC/scripts/pipeline.mk" BIN="$BUILD" MODEL="$SRC/data_samples/spm_2k.model"
   INPUT_DIR="$T/data" OUT="$T/out" CONFIG="$T/tiny.ini" SEQ_LEN=64 VALID_FRACTION=0.1
   WEIGHTS=all:1,sub:3 MIXTURE=proportional)

# 1. Everything, from nothing. STEPS comes from the config (4); SEQ_LEN from the make variable.
"${M[@]}" > "$T/make1.log" 2>&1 || { cat "$T/make1.log"; fail "first make"; }
for f in tokens/all/a.bin.meta tokens/sub/b.bin.meta tokens/sub/c.bin.meta split/sub/train/b.bin.meta \
         split/sub/valid/c.bin.meta split/all/valid/a.bin.meta packed/train/all/packed.bin.meta \
         packed/train/sub/packed.bin.meta packed/valid/all/packed.bin.meta packed/valid/sub/packed.bin.meta \
         run/checkpoints/step_4; do
  [ -e "$T/out/$f" ] || fail "first make did not write $f"
done
grep -q -- '--data.dataset_weights=all:1,sub:3 --data.mixture=proportional' "$T/make1.log" ||
  fail "WEIGHTS and MIXTURE do not reach loom-train"
# Shares 1:3 give a cycle of 4, sub all sub sub (sampler.h), read 2 a step (micro_bsz 2, one rank).
grep -q 'data mix step 1: all 50.0% sub 50.0%' "$T/make1.log" || fail "step 1's mix: $(grep 'data mix' "$T/make1.log")"
grep -q 'data mix step 2: all 0.0% sub 100.0%' "$T/make1.log" || fail "step 2's mix: $(grep 'data mix' "$T/make1.log")"
for set in all sub; do
  grep -q "\"val/${set}_loss\"" "$T/out/run/metrics.jsonl" || fail "no validation of dataset $set in metrics.jsonl"
done
# (commands as make echoes them; the tools' own log lines do not start with the binary's path)
[ "$(grep -c "^$BUILD/tokenize/loom-tokenize " "$T/make1.log")" = 3 ] || fail "3 tokenize jobs expected (notes.md is no input)"
grep -q -- '--data.seq_len=64' "$T/make1.log" || fail "SEQ_LEN does not reach loom-train"
grep -q -- 'pack --seq-len 64' "$T/make1.log" || fail "SEQ_LEN does not reach loom-pack pack"
stats=$("$BUILD/packer/loom-pack" stats --json "$T/out/packed/train/all" 2>/dev/null)
grep -q '"max": 64,' <<< "$stats" || fail "train packs are not 64 long"
[ "$(grep -c '"step"' "$T/out/run/metrics.jsonl")" -ge 4 ] || fail "no 4 steps in metrics.jsonl"
cp "$T/out/run/metrics.jsonl" "$T/metrics1.jsonl"

# 2. Nothing changed: nothing to do.
"${M[@]}" -q || fail "a second make would run something: $("${M[@]}" -n)"
"${M[@]}" > "$T/make2.log" 2>&1
! grep -q 'loom-' "$T/make2.log" || fail "a second make ran a tool: $(cat "$T/make2.log")"

# 3. One input touched, and 2 more steps: only b is tokenized again, training resumes at step 4.
# More steps change the schedule: refused (exit 2, both choices named) until ON_RESUME says how.
touch "$T/data/sub/b.json"
! "${M[@]}" STEPS=6 > "$T/make3a.log" 2>&1 || fail "more STEPS without ON_RESUME ran: $(tail -5 "$T/make3a.log")"
grep -q "data.total_steps: 4 -> 6.*lr_scheduler.on_resume=apply.*lr_scheduler.on_resume=keep" "$T/make3a.log" ||
  fail "the refusal does not name the change and both choices: $(grep ERROR "$T/make3a.log")"
[ ! -d "$T/out/run/checkpoints/step_5" ] || fail "the refused resume trained"
touch "$T/data/sub/b.json"
"${M[@]}" STEPS=6 ON_RESUME=apply > "$T/make3.log" 2>&1 || { cat "$T/make3.log"; fail "third make"; }
grep -q "lr_scheduler.on_resume=apply" "$T/make3.log" || fail "ON_RESUME does not reach loom-train"
[ "$(grep -c "^$BUILD/tokenize/loom-tokenize " "$T/make3.log")" = 1 ] ||
  fail "expected one tokenize job: $(grep "^$BUILD/tokenize/loom-tokenize " "$T/make3.log")"
grep -q "^$BUILD/tokenize/loom-tokenize .*sub/b.json$" "$T/make3.log" || fail "the tokenize job is not b.json's"
[ "$(grep -c "^$BUILD/packer/loom-pack split" "$T/make3.log")" = 1 ] || fail "expected one split job"
grep -q "resumed from .*step_4" "$T/make3.log" || fail "training did not resume from step_4: $(grep -i 'resum\|fresh' "$T/make3.log")"
! grep -q "starting fresh" "$T/make3.log" || fail "training restarted from scratch"
[ -d "$T/out/run/checkpoints/step_6" ] || fail "no final checkpoint step_6"
# The first run's metrics are kept; steps 5 and 6 were appended.
head -c "$(stat -c %s "$T/metrics1.jsonl")" "$T/out/run/metrics.jsonl" | cmp -s - "$T/metrics1.jsonl" ||
  fail "metrics.jsonl of the first run was rewritten"
appended=$(tail -n +"$(($(wc -l < "$T/metrics1.jsonl") + 1))" "$T/out/run/metrics.jsonl")
grep -q '"step": *6' <<< "$appended" || fail "no step 6 after the resume"
! grep -q '"step": *[1-4][,}]' <<< "$appended" || fail "steps 1-4 were trained again"
"${M[@]}" STEPS=6 -q || fail "make after the resume would run something: $("${M[@]}" STEPS=6 -n)"

# 4. A new SEQ_LEN repacks (and so trains).
# (output captured first: with pipefail, `make | grep -q` fails whenever grep exits before make's
# last write and make dies of SIGPIPE)
planned=$("${M[@]}" STEPS=6 SEQ_LEN=32 -n) || fail "make -n with SEQ_LEN=32 failed"
grep -q 'pack --seq-len 32' <<< "$planned" || fail "SEQ_LEN=32 does not repack"
echo OK
