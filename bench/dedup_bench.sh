#!/usr/bin/env bash
# loom-dedup's speed on real text against its two yardsticks, in one run (docs/DEDUP.md, "Scale"):
#   corpus: tests/data/botchan.txt, wagahaiwa_nekodearu.txt and tang_poems.txt, LINES lines to a
#      document, COPIES copies with edits (bench/dedup_peer.py corpus: exact copies, near copies,
#      rewritten and dropped documents), tokenized by loom-tokenize with internlm_v7.model;
#   check: on a small shard, loom-dedup's signatures against tests/dedup/minhash_ref.py (the slow
#      independent reference), and the peer against loom-dedup;
#   (a) signatures per core: `loom-dedup --stage signatures --threads 1` against the numpy peer
#      (bench/dedup_peer.py signatures: datatrove's MinHash in numpy, exact mod 2^61-1), both
#      pinned (taskset -c CPU); the signatures compared value for value after the runs;
#   (b) the same on all cores: `--threads N` against the peer's N processes (N = THREADS, nproc);
#   (c) end to end per core: loom-dedup, every stage (exact + near + apply), `--threads 1`, against
#      `loom-tokenize --threads 1` of the same text (tokens/s: the corpus's tokens over the time),
#      then each stage of loom-dedup alone (--stage S, pinned): where the time goes.
# Each pair alternates (A B A B ...) RUNS times after one warm-up each; medians (min-max) of wall
# seconds and of CPU seconds (user + sys of the whole process tree). Targets (verdicts on CPU
# seconds, the work each side does: on a shared machine the pinned core is not ours alone):
# signatures >= 10x the peer; end to end at least loom-tokenize's tokens per second.
# Prints a markdown section and appends it to LOOM_BENCH_LOG (default bench/history/log.md).
#
# usage: bench/dedup_bench.sh [BUILD_DIR] [CPU]     (defaults: build, 0)
# Knobs: COPIES (8), LINES (20 lines a document), DOC_LINES (0: the whole files, else their first
# lines), RUNS (5), THREADS (nproc), PEER_HASH (xxhash when python3-xxhash imports, else numpy:
# the peer's pure-numpy XXH64), PY (/usr/bin/python3 when it has numpy, else python3),
# LOOM_BENCH_COMMIT (the commit line's text, for a copy of the tree that is not its checkout).
# On the GPU machine's 16 cores (one device call, carry .debs; about 80 s with the build):
#   LOOM_TARGETS="loom-dedup loom-tokenize" bash scripts/device/build.sh > $OUT/build.log 2>&1 &&
#   LD_LIBRARY_PATH=/tmp/loom-prefix/usr/lib/x86_64-linux-gnu LOOM_BENCH_COMMIT=TREE_COMMIT \
#   LOOM_BENCH_LOG=$OUT/log.md bash bench/dedup_bench.sh build-gpu 0
# Needs loom-dedup and loom-tokenize built in BUILD_DIR, python3-numpy, taskset. Writes only under
# a temporary folder (on /dev/shm when there is one: loom-dedup's fsyncs cost nothing there).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CPU=${2:-0}
COPIES=${COPIES:-8}
LINES=${LINES:-20}
DOC_LINES=${DOC_LINES:-0}
RUNS=${RUNS:-5}
THREADS=${THREADS:-$(nproc)}
# Debian's python3 here (numpy, xxhash); on the GPU machine the image's python3 (numpy, maybe no xxhash).
if [ -z "${PY:-}" ]; then if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then PY=/usr/bin/python3; else PY=python3; fi; fi
LOG=${LOOM_BENCH_LOG:-bench/history/log.md}
MODEL=tests/data/internlm_v7.model
DEDUP="$BUILD/dedup/loom-dedup"
TOK="$BUILD/tokenize/loom-tokenize"
for b in "$DEDUP" "$TOK"; do [ -x "$b" ] || { echo "build it first: cmake --build $BUILD --target $(basename "$b")" >&2; exit 2; }; done
command -v taskset >/dev/null || { echo "needs taskset (util-linux)" >&2; exit 2; }
HAVE_XXHASH=$($PY -c 'import xxhash' 2>/dev/null && echo 1 || echo 0)
PEER_HASH=${PEER_HASH:-$([ "$HAVE_XXHASH" = 1 ] && echo xxhash || echo numpy)}
WORK=$(mktemp -d /dev/shm/loom_dedup_bench.XXXXXX 2>/dev/null || mktemp -d /tmp/loom_dedup_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# Copies of the two tools: every run uses the same binaries, whatever a build does meanwhile.
mkdir -p "$WORK/bin"
cp "$DEDUP" "$TOK" "$WORK/bin/"
DEDUP=$WORK/bin/loom-dedup
TOK=$WORK/bin/loom-tokenize

# "wall cpu" seconds of "$@" (output in WORK/log; bash's time, to the millisecond).
timed() {
  local TIMEFORMAT='%3R %3U %3S' rc=0
  { time "$@" >"$WORK/log" 2>&1 || rc=$?; } 2> "$WORK/time"
  [ $rc = 0 ] || { tail -5 "$WORK/log" >&2; echo "failed ($rc): $*" >&2; exit 1; }
  awk '{printf "%.4f %.4f\n", $1, $2 + $3}' "$WORK/time"
}
median() { sort -g | awk '{a[NR]=$1} END{printf "%.4f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
spread() { sort -g | awk '{a[NR]=$1} END{printf "%.4f-%.4f", a[1], a[NR]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b/a}'; }
# pair ID NAME 'COMMAND A' 'COMMAND B': RUNS alternating runs after one warm-up each; one table row,
# the medians in WORK/ID.med ("A_wall B_wall A_cpu B_cpu"), the last line of each timed B run's
# output in WORK/ID.b (the peer's parts).
pair() {
  local id=$1 name=$2 a=$3 b=$4 i
  : > "$WORK/a"; : > "$WORK/b"; : > "$WORK/$id.b"
  timed bash -c "$a" >/dev/null; timed bash -c "$b" >/dev/null
  for ((i = 0; i < RUNS; i++)); do
    timed bash -c "$a" >> "$WORK/a"; timed bash -c "$b" >> "$WORK/b"; tail -1 "$WORK/log" >> "$WORK/$id.b"
  done
  local aw bw ac bc
  aw=$(cut -d' ' -f1 "$WORK/a" | median); bw=$(cut -d' ' -f1 "$WORK/b" | median)
  ac=$(cut -d' ' -f2 "$WORK/a" | median); bc=$(cut -d' ' -f2 "$WORK/b" | median)
  echo "$aw $bw $ac $bc" > "$WORK/$id.med"
  echo "| $name | $aw ($(cut -d' ' -f1 "$WORK/a" | spread)) | $bw ($(cut -d' ' -f1 "$WORK/b" | spread)) |" \
       "$(ratio "$aw" "$bw") | $ac ($(cut -d' ' -f2 "$WORK/a" | spread)) |" \
       "$bc ($(cut -d' ' -f2 "$WORK/b" | spread)) | $(ratio "$ac" "$bc") |"
}
# parts ID: "shingles hashing permutations hashing+permutations" CPU seconds, medians over WORK/ID.b.
parts() {
  local f=$WORK/$1.b
  echo "$(sed -n 's/.* \([0-9]*\) shingles;.*/\1/p' "$f" | tail -1)" \
       "$(sed -n 's/.*hashing \([0-9.]*\) CPU s, .*/\1/p' "$f" | median)" \
       "$(sed -n 's/.*permutations + min \([0-9.]*\) CPU s.*/\1/p' "$f" | median)" \
       "$(sed -n 's/.*hashing \([0-9.]*\) CPU s, permutations + min \([0-9.]*\) CPU s.*/\1 \2/p' "$f" | awk '{print $1 + $2}' | median)"
}
HEAD="| A / B | A wall s | B wall s | B/A | A CPU s | B CPU s | B/A |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |"

# The corpus and its shard.
mkdir -p "$WORK/src"
for f in tests/data/botchan.txt tests/data/wagahaiwa_nekodearu.txt tests/data/tang_poems.txt; do
  if [ "$DOC_LINES" = 0 ]; then cp "$f" "$WORK/src/"; else head -n "$DOC_LINES" "$f" > "$WORK/src/$(basename "$f")"; fi
done
corpus_line=$($PY bench/dedup_peer.py corpus "$WORK/corpus.txt" "$COPIES" "$LINES" \
  "$WORK/src/botchan.txt" "$WORK/src/wagahaiwa_nekodearu.txt" "$WORK/src/tang_poems.txt")
TOKENIZE="$TOK --model $MODEL --txt-doc paragraph --threads 1"
$TOKENIZE --output-dir "$WORK/tok" "$WORK/corpus.txt" > "$WORK/tok.log" 2>&1 || { cat "$WORK/tok.log" >&2; exit 1; }
SHARD=$WORK/tok/corpus.bin
read -r DOCS TOKENS < <($PY -c 'import numpy as np, sys; h = np.fromfile(sys.argv[1], np.uint8, 128); print(*h[40:56].view("<u8"))' "$SHARD.meta")

# Correctness first, on a small shard: loom against the independent reference, the peer against loom.
head -n 400 "$WORK/corpus.txt" > "$WORK/small.txt"
{ $TOKENIZE --output-dir "$WORK/small" "$WORK/small.txt" &&
  "$DEDUP" --stage signatures --work-dir "$WORK/small_w" --output-dir "$WORK/small_o" "$WORK/small/small.bin"; } \
  > "$WORK/small.log" 2>&1 || { cat "$WORK/small.log" >&2; exit 1; }
if [ "$HAVE_XXHASH" = 1 ]; then
  check="loom-dedup against tests/dedup/minhash_ref.py: $($PY tests/dedup/minhash_ref.py "$WORK/small/small.bin" "$WORK/small_w" 5 14 8 1)"
else
  check="tests/dedup/minhash_ref.py not run (it needs python3-xxhash)"
fi
$PY bench/dedup_peer.py signatures "$WORK/small/small.bin" "$WORK/small.npy" --hash "$PEER_HASH" > /dev/null
check="$check; the peer against loom-dedup: $($PY bench/dedup_peer.py compare "$WORK/small_w/sources/00000.sig" "$WORK/small.npy")"

SIGS="$DEDUP --stage signatures --work-dir $WORK/w --output-dir $WORK/o $SHARD"  # after rm -rf WORK/w: a rerun skips
PEER="$PY bench/dedup_peer.py signatures $SHARD $WORK/peer.npy --hash $PEER_HASH"
same() {  # fails the bench unless the last runs' signatures are identical
  $PY bench/dedup_peer.py compare "$WORK/w/sources/00000.sig" "$WORK/peer.npy" > /dev/null || { echo "FAILED: $1" >&2; exit 1; }
}
{
  echo
  echo "## loom-dedup against the numpy MinHash peer and loom-tokenize (bench/dedup_bench.sh), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -n "${LOOM_BENCH_COMMIT:-}" ]; then  # the GPU machine's checkout names its own base, not the tree's
    echo "- commit: $LOOM_BENCH_COMMIT"
  elif git rev-parse --short HEAD > /dev/null 2>&1; then
    echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- dedup tokenize common bench/dedup_peer.py bench/dedup_bench.sh || echo ' (+ uncommitted changes)')"
  else
    echo "- commit: not a git checkout (the caller records the tree's commit)"
  fi
  echo "- command: \`COPIES=$COPIES LINES=$LINES DOC_LINES=$DOC_LINES RUNS=$RUNS THREADS=$THREADS PEER_HASH=$PEER_HASH bash bench/dedup_bench.sh $BUILD $CPU\`; A and B alternate $RUNS times after a warm-up each; medians (min-max); CPU = user + sys of the whole process"
  echo "- corpus: ${corpus_line#*: }; $DOCS documents, $TOKENS tokens (internlm_v7.model, --txt-doc paragraph)"
  echo "- peer: bench/dedup_peer.py, $PEER_HASH hashing of the n-grams ($([ "$PEER_HASH" = xxhash ] && echo 'xxhash.xxh64_intdigest per n-gram, as datatrove' || echo "numpy's XXH64 over all n-grams at once: python3-xxhash is missing")), permutations + min in numpy over [shingles x 112], exact mod 2^61-1"
  echo "- check: $check"
  echo
  echo "### (a) Signatures per core (taskset -c $CPU), ngram 5, 14 bands x 8"
  echo
  echo "$HEAD"
  pair sig1 "loom-dedup --stage signatures --threads 1 / peer, 1 process" "rm -rf $WORK/w && taskset -c $CPU $SIGS --threads 1" "taskset -c $CPU $PEER"
  read -r sw pw sc pc < "$WORK/sig1.med"
  parts sig1 > "$WORK/sig1.parts"
  read -r shingles hash_cpu perm_cpu parts_cpu < "$WORK/sig1.parts"
  same "loom-dedup's signatures differ from the peer's (one core)"
  echo
  echo "- the peer's parts, medians of its $RUNS runs: hashing $hash_cpu CPU s, permutations + min $perm_cpu CPU s ($shingles shingles); its last line: $(tail -1 "$WORK/sig1.b")"
  echo "- signatures: identical (loom-dedup's W/sources/00000.sig against the peer's .npy, every document and hash)"
  echo
  echo "### (b) Signatures on $THREADS cores"
  echo
  echo "$HEAD"
  pair sign "loom-dedup --stage signatures --threads $THREADS / peer, $THREADS processes" "rm -rf $WORK/w && $SIGS --threads $THREADS" "$PEER --processes $THREADS"
  same "loom-dedup's signatures differ from the peer's ($THREADS threads / processes)"
  echo
  parts sign > "$WORK/sign.parts"
  read -r _ hash_n perm_n _ < "$WORK/sign.parts"
  echo "- the peer's parts, summed over its processes, medians of its $RUNS runs: hashing $hash_n CPU s, permutations + min $perm_n CPU s"
  echo "- signatures: identical"
  read -r a1w _ a1c _ < "$WORK/sig1.med"
  read -r anw pnw anc pnc < "$WORK/sign.med"
  echo "- loom-dedup's scaling: $THREADS threads / 1 thread = $(ratio "$anw" "$a1w")x by wall time, CPU seconds $(ratio "$a1c" "$anc")x of one thread's"
  echo
  echo "### (c) End to end per core (taskset -c $CPU): loom-dedup, every stage, against loom-tokenize of the same text"
  echo
  echo "$HEAD"
  pair e2e "loom-dedup --threads 1 (exact + near + apply) / loom-tokenize --threads 1" \
    "rm -rf $WORK/we $WORK/oe && taskset -c $CPU $DEDUP --threads 1 --work-dir $WORK/we --output-dir $WORK/oe $SHARD" \
    "rm -rf $WORK/te && taskset -c $CPU $TOKENIZE --output-dir $WORK/te $WORK/corpus.txt"
  read -r ew tw ec tc < "$WORK/e2e.med"
  echo
  echo "- tokens/s ($TOKENS tokens): loom-dedup $(awk -v t="$TOKENS" -v s="$ew" 'BEGIN{printf "%.0f", t/s}') by wall time, $(awk -v t="$TOKENS" -v s="$ec" 'BEGIN{printf "%.0f", t/s}') per CPU second; loom-tokenize $(awk -v t="$TOKENS" -v s="$tw" 'BEGIN{printf "%.0f", t/s}') and $(awk -v t="$TOKENS" -v s="$tc" 'BEGIN{printf "%.0f", t/s}')"
  echo "- removed: $($PY -c 'import json, sys; t = json.load(open(sys.argv[1]))["total"]; r = t["removed"]; print(r["exact"]["documents"], "exact and", r["near"]["documents"], "near of", t["documents_in"], "documents,", t["documents_out"], "kept")' "$WORK/we/summary.json")"
  stages=""
  rm -rf "$WORK/ws" "$WORK/os"
  for s in signatures buckets clusters apply; do
    t=$(timed taskset -c "$CPU" "$DEDUP" --stage "$s" --threads 1 --work-dir "$WORK/ws" --output-dir "$WORK/os" "$SHARD")
    stages="$stages${stages:+, }$s ${t#* } s"
  done
  echo "- where loom-dedup's time goes, one run stage by stage (CPU s, pinned): $stages"
  t1=$(timed taskset -c "$CPU" bash -c "rm -rf $WORK/w1 && $DEDUP --stage signatures --bands 1 --rows 1 --work-dir $WORK/w1 --output-dir $WORK/o1 $SHARD")
  t1=${t1#* }
  echo "- the signatures stage with one hash (--bands 1 --rows 1: reading, verifying, shingles, exact keys, files): $t1 CPU s;" \
       "so 111 more hashes take $(awk -v a="$sc" -v b="$t1" 'BEGIN{printf "%.3f", a - b}') of its $sc CPU s (median above)," \
       "$(awk -v a="$sc" -v b="$t1" -v n="$shingles" 'BEGIN{printf "%.2f", (a - b) / 111 / n * 1e9}') ns a shingle and hash ($shingles shingles)"
  echo
  echo "### Targets"
  echo
  verdict() { awk -v r="$1" -v t="$2" 'BEGIN{print (r >= t ? "met" : "NOT met")}'; }
  echo "| target | figure (CPU s) | by wall time | verdict |"
  echo "| --- | ---: | ---: | --- |"
  echo "| signatures per core >= 10x the numpy peer | $(ratio "$sc" "$pc")x | $(ratio "$sw" "$pw")x | $(verdict "$(ratio "$sc" "$pc")" 10) |"
  echo "| the same against the peer's hashing + permutations alone (no start-up, no reading; their median) | $(ratio "$sc" "$parts_cpu")x | - | $(verdict "$(ratio "$sc" "$parts_cpu")" 10) |"
  echo "| signatures on $THREADS cores against the peer's $THREADS processes | $(ratio "$anc" "$pnc")x | $(ratio "$anw" "$pnw")x | $(verdict "$(ratio "$anc" "$pnc")" 10) |"
  echo "| end to end per core >= loom-tokenize (tokens/s) | $(ratio "$ec" "$tc")x | $(ratio "$ew" "$tw")x | $(verdict "$(ratio "$ec" "$tc")" 1) |"
  if awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v n="$(nproc)" 'BEGIN{exit !(l > n / 2)}'; then
    echo
    echo "Note: the machine was shared while this ran (load average $(cut -d' ' -f1 /proc/loadavg) at the end on $(nproc) cores):"
    echo "wall times and the scaling on all cores are not representative; the CPU seconds compare the work."
  fi
} | tee -a "$LOG"
