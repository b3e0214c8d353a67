#!/usr/bin/env bash
# The pipeline's stages on real, short documents, per core, in one command:
#   1. loom-tokenize of a one-line input, end to end (model load is most of it; target <= 0.05 s);
#   2. 1,000 one-kilobyte files through scripts/pipeline.mk's tokenize, split and pack
#      (make -j NPROC pack; wall seconds per file, target <= 0.1);
#   3. Chinese (bench/data/tang_poems.txt, Tang poems one a line, MIT, see bench/data/README.md) and
#      Japanese (tests/data/wagahaiwa_nekodearu.txt) whole process, pinned to one core (taskset -c
#      CPU): `loom-tokenize --threads 1` against libsentencepiece's Encode loop of the same
#      documents (Debian's spm_encode --output_format=id); the ids compared document by document
#      first (bos/eos aside); target >= 3x;
#   4. loom-pack pack on short real documents against cp (bench/pack_bench.sh BUILD short).
# Each pair alternates (A B A B ...) RUNS times; medians and min-max of wall seconds (and of CPU
# seconds, user + sys, for the pinned pairs) are printed as markdown, with machine, load and commit.
#
# usage: bench/short_docs_bench.sh [BUILD_DIR] [CPU]     (defaults: build, 0; RUNS=7, FILES=1000)
# Sizes, for a quick check: DOC_LINES (0: whole corpora in 3., else their first lines), PIPE_RUNS (3
# pipeline runs in 2.), PACK_MB (150, the shard of 4.).
# Needs loom-tokenize and loom-pack built in BUILD_DIR, Debian's sentencepiece (spm_encode),
# python3-numpy, make, taskset. Writes only under a temporary folder (on /dev/shm when there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CPU=${2:-0}
RUNS=${RUNS:-7}
FILES=${FILES:-1000}
DOC_LINES=${DOC_LINES:-0}
PIPE_RUNS=${PIPE_RUNS:-3}
PACK_MB=${PACK_MB:-150}
MODEL=tests/data/internlm_v7.model
TOK="$BUILD/tokenize/loom-tokenize"
PACK="$BUILD/packer/loom-pack"
PY=${PY:-/usr/bin/python3}
for b in "$TOK" "$PACK"; do [ -x "$b" ] || { echo "build it first: cmake --build $BUILD --target $(basename "$b")" >&2; exit 2; }; done
command -v spm_encode >/dev/null || { echo "needs Debian's sentencepiece (spm_encode)" >&2; exit 2; }
WORK=$(mktemp -d /dev/shm/loom_short_docs.XXXXXX 2>/dev/null || mktemp -d /tmp/loom_short_docs.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# "wall cpu" seconds of "$@" (output thrown away; bash's time, to the millisecond).
timed() {
  local TIMEFORMAT='%3R %3U %3S' rc=0
  { time "$@" >"$WORK/log" 2>&1 || rc=$?; } 2> "$WORK/time"
  [ $rc = 0 ] || { tail -5 "$WORK/log" >&2; echo "failed ($rc): $*" >&2; exit 1; }
  awk '{printf "%.4f %.4f\n", $1, $2 + $3}' "$WORK/time"
}
median() { sort -g | awk '{a[NR]=$1} END{printf "%.4f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
spread() { sort -g | awk '{a[NR]=$1} END{printf "%.4f-%.4f", a[1], a[NR]}'; }
# pair NAME 'COMMAND A' 'COMMAND B': RUNS alternating runs after one warm-up each; one table row.
pair() {
  local name=$1 a=$2 b=$3 i
  : > "$WORK/a"; : > "$WORK/b"
  timed bash -c "$a" >/dev/null; timed bash -c "$b" >/dev/null
  for ((i = 0; i < RUNS; i++)); do timed bash -c "$a" >> "$WORK/a"; timed bash -c "$b" >> "$WORK/b"; done
  local aw bw ac bc
  aw=$(cut -d' ' -f1 "$WORK/a" | median); bw=$(cut -d' ' -f1 "$WORK/b" | median)
  ac=$(cut -d' ' -f2 "$WORK/a" | median); bc=$(cut -d' ' -f2 "$WORK/b" | median)
  echo "| $name | $aw ($(cut -d' ' -f1 "$WORK/a" | spread)) | $bw ($(cut -d' ' -f1 "$WORK/b" | spread)) |" \
       "$(awk -v a="$aw" -v b="$bw" 'BEGIN{printf "%.2f", b/a}') | $ac ($(cut -d' ' -f2 "$WORK/a" | spread)) |" \
       "$bc ($(cut -d' ' -f2 "$WORK/b" | spread)) | $(awk -v a="$ac" -v b="$bc" 'BEGIN{printf "%.2f", b/a}') |"
}

echo "## The pipeline's stages on real short documents (bench/short_docs_bench.sh), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet -- common spm tokenize packer || echo ' (+ uncommitted changes)')"
echo "- command: \`RUNS=$RUNS FILES=$FILES DOC_LINES=$DOC_LINES PIPE_RUNS=$PIPE_RUNS PACK_MB=$PACK_MB bash bench/short_docs_bench.sh $BUILD $CPU\`; A and B alternate $RUNS times after a warm-up each; medians (min-max); CPU = user + sys of the whole process"
echo

# 1. One line, end to end.
echo "Hello world, this is one line." > "$WORK/one.txt"
echo "### One-line input, end to end (model load included), pinned to CPU $CPU"
echo
echo "| A / B | A wall s | B wall s | B/A | A CPU s | B CPU s | B/A |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
pair "loom-tokenize --threads 1 / spm_encode, one line" \
  "taskset -c $CPU $TOK --model $MODEL --threads 1 --output-dir $WORK/one $WORK/one.txt" \
  "taskset -c $CPU spm_encode --model=$MODEL --output_format=id < $WORK/one.txt > $WORK/one.ids"
echo

# 2. Chinese and Japanese, whole process, one core; exact first.
echo "### Chinese and Japanese per core, whole process (taskset -c $CPU)"
echo
corpus() {  # SOURCE NAME: the corpus (or its first DOC_LINES lines) as WORK/NAME.txt, its documents as NAME.docs
  if [ "$DOC_LINES" = 0 ]; then cp "$1" "$WORK/$2.txt"; else head -n "$DOC_LINES" "$1" > "$WORK/$2.txt"; fi
  $PY bench/tokenize_peer.py docs "$WORK/$2.txt" "$WORK/$2.docs" >/dev/null
}
corpus tests/data/wagahaiwa_nekodearu.txt wagahaiwa
corpus bench/data/tang_poems.txt tang
rows=()
for c in tang wagahaiwa; do
  "$TOK" --model $MODEL --threads 1 --output-dir "$WORK/ids" "$WORK/$c.txt" >/dev/null 2>&1
  spm_encode --model=$MODEL --output_format=id < "$WORK/$c.docs" > "$WORK/$c.ids"
  $PY - "$WORK/ids/$c.bin" "$WORK/$c.ids" <<'PYEOF'
import sys, numpy as np
bin_path, ids_path = sys.argv[1], sys.argv[2]
meta = open(bin_path + ".meta", "rb").read()
tokens = np.fromfile(bin_path, np.uint32)
lines = open(ids_path).read().split("\n")[:-1]
# documents: bos ... eos (ids 1 and 2 of internlm_v7.model), in input order
offsets = np.frombuffer(meta, np.uint64, len(lines) + 1, 128)
assert offsets[-1] == len(tokens), (offsets[-1], len(tokens))
for i, line in enumerate(lines):
    doc = tokens[offsets[i]:offsets[i + 1]]
    want = [int(x) for x in line.split()]
    assert doc[0] == 1 and doc[-1] == 2 and doc[1:-1].tolist() == want, f"document {i} differs"
print(f"{bin_path}: {len(lines)} documents, the same ids as spm_encode", file=sys.stderr)
PYEOF
  rows+=("$(pair "$c: loom-tokenize --threads 1 / spm_encode, $(stat -c %s "$WORK/$c.docs") B of documents" \
    "taskset -c $CPU $TOK --model $MODEL --threads 1 --output-dir $WORK/out $WORK/$c.txt" \
    "taskset -c $CPU spm_encode --model=$MODEL --output_format=id < $WORK/$c.docs > $WORK/$c.spm")")
done
echo "| A / B | A wall s | B wall s | B/A | A CPU s | B CPU s | B/A |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '%s\n' "${rows[@]}"
echo

# 3. FILES one-kilobyte files through the pipeline (tokenize, split, pack), make -j NPROC.
# VALID_FRACTION 0.5: split writes no side without documents, and the pipeline needs both; a
# document's side depends on (seed, index in its file) alone, so every file has a valid document
# at 0.5 (not at the default 0.05, with about 13 documents a file).
echo "### $FILES one-kilobyte files through scripts/pipeline.mk (tokens, split, pack; VALID_FRACTION=0.5), make -j $(nproc)"
echo
mkdir -p "$WORK/kb"
$PY - "$WORK/kb" "$FILES" <<'PYEOF'
import sys
out, n = sys.argv[1], int(sys.argv[2])
lines = [l.strip() for l in open("tests/data/botchan.txt", encoding="utf-8-sig") if l.strip()]
lines += [l.strip() for l in open("tests/data/wagahaiwa_nekodearu.txt", encoding="utf-8") if l.strip()]
lines = [l for l in lines if len(l.encode()) < 128]  # 8 or more documents a file: both sides of split get some
at = 0
for i in range(n):  # whole lines, up to 1024 bytes a file
    text = b""
    while len(text) + len((lines[at % len(lines)] + "\n").encode()) <= 1024:
        text += (lines[at % len(lines)] + "\n").encode()
        at += 1
    open(f"{out}/f{i:05d}.txt", "wb").write(text)
PYEOF
: > "$WORK/pipe"
for ((i = 0; i < PIPE_RUNS; i++)); do
  rm -rf "$WORK/pipe_out"
  timed make -s -f scripts/pipeline.mk -j "$(nproc)" pack BIN="$BUILD" MODEL=$MODEL INPUT_DIR="$WORK/kb" \
    OUT="$WORK/pipe_out" SEQ_LEN=256 STEPS=1 VALID_FRACTION=0.5 >> "$WORK/pipe"
done
w=$(cut -d' ' -f1 "$WORK/pipe" | median)
echo "- $FILES files of $(du -sb "$WORK/kb" | cut -f1) bytes; $PIPE_RUNS runs from scratch: $w s median ($(cut -d' ' -f1 "$WORK/pipe" | spread)), $(awk -v w="$w" -v n="$FILES" 'BEGIN{printf "%.4f", w/n}') s a file"
echo

# 4. loom-pack pack on short real documents.
echo "### loom-pack pack on short real documents"
echo
RUNS=$RUNS bash bench/pack_bench.sh "$BUILD" short "$PACK_MB"
