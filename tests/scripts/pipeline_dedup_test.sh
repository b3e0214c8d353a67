#!/usr/bin/env bash
# scripts/pipeline.mk with DEDUP=1: one loom-dedup over both datasets' token shards, between tokenize
# and split. Planted: an exact copy across two inputs of one dataset, one across datasets, an input
# of nothing but copies (no output shard: its split writes nothing, its old split shards go) and a
# document quoting an evaluation item. The packs hold exactly the documents left (counted against
# the text files themselves); a second make runs nothing; touching the eval file or an input, or
# changing DEDUP_FLAGS, reruns loom-dedup and every split; DEDUP unset again splits the token
# shards, with no dedup step in its plan.
# usage: pipeline_dedup_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$2
mkdir -p "$BUILD/test_tmp"
T=$(mktemp -d "$BUILD/test_tmp/pipeline_dedup.XXXXXX")
[ -n "${LOOM_KEEP_TMP:-}" ] || trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A line of a .txt is a document. P: 80 distinct lines of prose (no two near copies); dataset code
# comes before web (by name), so a copy across them is kept in code.
#   code/c: P56-P80, then P12 (kept here: web/a's P12, its document 11, is removed)
#   code/d: P60, P61 (copies of c's documents 4 and 5: every document removed)
#   web/a:  P1-P30
#   web/b:  P31-P55, then P5 (document 25, a copy of a's document 4); P40 (document 9) is an eval item
mkdir -p "$T/data/web" "$T/data/code"
# (awk reads to the end: a head that stops early would kill the pipe, which pipefail reports)
tr -d '\r' < "$SRC/data_samples/botchan_head.txt" | awk 'NR >= 60 && length($0) > 60 && ++n <= 80' > "$T/P.txt"
[ "$(sort -u "$T/P.txt" | wc -l)" = 80 ] || fail "the corpus has no 80 distinct lines"
p() { sed -n "$1p" "$T/P.txt"; }
{ sed -n 56,80p "$T/P.txt"; p 12; } > "$T/data/code/c.txt"
{ p 60; p 61; } > "$T/data/code/d.txt"
sed -n 1,30p "$T/P.txt" > "$T/data/web/a.txt"
{ sed -n 31,55p "$T/P.txt"; p 5; } > "$T/data/web/b.txt"
echo "{\"text\": \"$(p 40 | sed 's/[\\"]/\\&/g')\"}" > "$T/eval.jsonl"
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
   INPUT_DIR="$T/data" OUT="$T/out" CONFIG="$T/tiny.ini" SEQ_LEN=64 VALID_FRACTION=0.1)
D=(DEDUP=1 DEDUP_EVAL="$T/eval.jsonl")
# Documents in the packs, train and valid, of both datasets.
packed_docs() {
  local n=0 d
  for d in "$T"/out/packed/*/*/; do
    n=$((n + $("$BUILD/packer/loom-pack" stats --json "$d" 2>/dev/null |
               sed -n 's/^{"files": [0-9]*, "documents": \([0-9]*\),.*/\1/p')))
  done
  echo $n
}
all_docs=$(cat "$T"/data/*/*.txt | wc -l)
unique_clean_docs=$(cat "$T"/data/*/*.txt | sort -u | grep -cvxF "$(p 40)")
[ "$all_docs" = 84 ] && [ "$unique_clean_docs" = 79 ] || fail "corpus: $all_docs documents, $unique_clean_docs left"

# 1. Without DEDUP first (d is split), then DEDUP=1 down to training: the packs lose the 5 planted
# documents, d's old split shards are removed, and the report names each removal.
"${M[@]}" pack > "$T/make0.log" 2>&1 || { tail -20 "$T/make0.log"; fail "make without DEDUP"; }
[ "$(packed_docs)" = "$all_docs" ] || fail "without DEDUP the packs hold $(packed_docs) documents, not $all_docs"
[ -e "$T/out/split/code/train/d.bin.meta" ] || fail "d was not split without DEDUP"
"${M[@]}" "${D[@]}" > "$T/make1.log" 2>&1 || { tail -20 "$T/make1.log"; fail "make with DEDUP=1"; }
[ "$(grep -c "^$BUILD/dedup/loom-dedup " "$T/make1.log")" = 1 ] || fail "not one loom-dedup run"
grep -q -- "--eval $T/eval.jsonl --model $SRC/data_samples/spm_2k.model " "$T/make1.log" ||
  fail "DEDUP_EVAL does not reach loom-dedup with the model"
[ "$(packed_docs)" = "$unique_clean_docs" ] ||
  fail "with DEDUP=1 the packs hold $(packed_docs) documents, not $unique_clean_docs"
[ -d "$T/out/run/checkpoints/step_2" ] || fail "no final checkpoint"
[ ! -e "$T/out/dedup/out/code@d.bin" ] || fail "d, every document removed, has an output shard"
for side in train valid; do
  [ ! -e "$T/out/split/code/$side/d.bin" ] && [ ! -e "$T/out/split/code/$side/d.bin.meta" ] ||
    fail "d's old $side split shard is still there"
done
[ -e "$T/out/split/code/d.split" ] || fail "d's split stamp is missing"
grep -q "data/code/d.txt: every document removed by loom-dedup" "$T/make1.log" || fail "no word that d is not split"
report=$T/out/dedup/work/report.jsonl
for want in 'web@a.bin","index":11,[^}]*"reason":"exact"[^}]*"matched_input":"[^"]*/code@c.bin","matched_index":25,' \
            'web@b.bin","index":25,[^}]*"reason":"exact"[^}]*"matched_input":"[^"]*/web@a.bin","matched_index":4,' \
            'code@d.bin","index":0,[^}]*"reason":"exact"[^}]*"matched_index":4,' \
            'code@d.bin","index":1,[^}]*"reason":"exact"[^}]*"matched_index":5,' \
            'web@b.bin","index":9,[^}]*"reason":"contaminated"[^}]*"eval_item":"[^"]*eval.jsonl:1"'; do
  grep -q "$want" "$report" || fail "the report lacks $want: $(cat "$report")"
done
[ "$(wc -l < "$report")" = 5 ] || fail "removals other than the 5 planted: $(cat "$report")"

# 2. Nothing changed: nothing to do.
"${M[@]}" "${D[@]}" -q || fail "a second make would run something: $("${M[@]}" "${D[@]}" -n)"
"${M[@]}" "${D[@]}" > "$T/make2.log" 2>&1
! grep -q 'loom-' "$T/make2.log" || fail "a second make ran a tool: $(cat "$T/make2.log")"

# 3. The eval file touched: loom-dedup and every split run again (not tokenize), the packs the same.
touch "$T/eval.jsonl"
"${M[@]}" "${D[@]}" pack > "$T/make3.log" 2>&1 || { tail -20 "$T/make3.log"; fail "make after touching the eval file"; }
[ "$(grep -c "^$BUILD/dedup/loom-dedup " "$T/make3.log")" = 1 ] ||
  fail "touching the eval file did not rerun loom-dedup"
! grep -q "^$BUILD/tokenize/loom-tokenize " "$T/make3.log" || fail "touching the eval file re-tokenized"
split_re="^if \[ -e $T/out/dedup/shards/[a-z]*/[a-d].bin.meta \]; then $BUILD/packer/loom-pack split "
[ "$(grep -c "$split_re" "$T/make3.log")" = 4 ] ||
  fail "not 4 splits after loom-dedup"
[ "$(packed_docs)" = "$unique_clean_docs" ] || fail "after the rerun the packs hold $(packed_docs) documents"
"${M[@]}" "${D[@]}" pack -q || fail "make after the rerun would run something: $("${M[@]}" "${D[@]}" pack -n)"

# 4. Other DEDUP_FLAGS (recorded in OUT/dedup/args): loom-dedup again, with them.
planned=$("${M[@]}" "${D[@]}" DEDUP_FLAGS=--near=false pack -n) || fail "make -n with DEDUP_FLAGS failed"
grep -q "^$BUILD/dedup/loom-dedup .*--near=false" <<< "$planned" ||
  fail "new DEDUP_FLAGS do not rerun loom-dedup: $planned"

# 5. An input touched: it is tokenized again, then loom-dedup, every split, the packs and training.
touch "$T/data/web/a.txt"
planned=$("${M[@]}" "${D[@]}" -n) || fail "make -n after touching an input failed"
[ "$(grep -c "^$BUILD/tokenize/loom-tokenize .*/web/a.txt$" <<< "$planned")" = 1 ] &&
  [ "$(grep -c "^$BUILD/tokenize/loom-tokenize " <<< "$planned")" = 1 ] || fail "not a.txt alone re-tokenized: $planned"
[ "$(grep -c "^$BUILD/dedup/loom-dedup " <<< "$planned")" = 1 ] && [ "$(grep -c "$split_re" <<< "$planned")" = 4 ] &&
  grep -q "^$BUILD/trainer/loom-train " <<< "$planned" || fail "a touched input does not rerun what follows: $planned"

# 6. DEDUP unset: the plan from nothing has no dedup step and splits the token shards; in this OUT the
# splits are redone from the token shards, every document back in the packs.
planned=$("${M[@]}" OUT="$T/fresh" -n) || fail "make -n without DEDUP failed"
! grep -q 'loom-dedup\|/dedup/' <<< "$planned" || fail "a dedup step without DEDUP: $planned"
[ "$(grep -c "^$BUILD/packer/loom-pack split .* $T/fresh/tokens/[a-z]*/[a-d].bin$" <<< "$planned")" = 4 ] ||
  fail "without DEDUP the splits do not read the token shards: $planned"
"${M[@]}" pack > "$T/make5.log" 2>&1 || { tail -20 "$T/make5.log"; fail "make without DEDUP after DEDUP=1"; }
[ "$(grep -c "^$BUILD/packer/loom-pack split .* $T/out/tokens/" "$T/make5.log")" = 4 ] ||
  fail "DEDUP unset did not split the token shards again"
[ "$(packed_docs)" = "$all_docs" ] || fail "DEDUP unset: the packs hold $(packed_docs) documents, not $all_docs"
"${M[@]}" pack -q || fail "make without DEDUP would run something again: $("${M[@]}" pack -n)"
echo OK
