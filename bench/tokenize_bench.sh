#!/usr/bin/env bash
# loom-tokenize against its peers on the same documents, in one run:
#   (a) InternLM's tools/tokenizer.py way (Python, one process)      bench/tokenize_peer.py internlm
#   (b) raw single-thread SentencePiece encode (C++, Debian's spm_encode --output_format=id)
#   loom-tokenize with all cores, --format loom and --format internlm
# Figures: MB/s = bytes of document text (stripped non-empty lines) / wall seconds; tokens/s =
# tokens written (loom's count, BOS+EOS included) / wall seconds. Best of REPEAT runs each.
# Appends a section to bench/RESULTS.md. Usage: bench/tokenize_bench.sh [BUILD_DIR] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEAT=${2:-3}
PY=/usr/bin/python3
TOK=$BUILD/tokenize/loom-tokenize
MODEL=../shared/corpora/internlm_v7.model
INPUTS=(../shared/corpora/botchan.txt ../shared/corpora/wagahaiwa_nekodearu.txt)
CORES=$(nproc)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -x "$TOK" ] || { echo "build loom-tokenize first ($TOK)"; exit 1; }

now() { date +%s.%N; }
calc() { $PY -c "print($1)"; }
# best_of CMD...: the smallest wall time of REPEAT runs
best_of() {
  local best=""
  for _ in $(seq "$REPEAT"); do
    local t0 t1 dt
    t0=$(now); "$@" >/dev/null 2>&1; t1=$(now)
    dt=$(calc "$t1 - $t0")
    if [ -z "$best" ] || [ "$(calc "int($dt < $best)")" = 1 ]; then best=$dt; fi
  done
  echo "$best"
}

bytes=0
for f in "${INPUTS[@]}"; do
  n=$($PY bench/tokenize_peer.py docs "$f" "$WORK/$(basename "$f").docs")
  bytes=$((bytes + n))
done
cat "$WORK"/*.docs > "$WORK/all.docs"
tokens=$($TOK --model $MODEL --output-dir "$WORK/count" "${INPUTS[@]}" 2>&1 | sed -n 's/.* docs, \([0-9]*\) tokens, .*/\1/p' | tail -1)

run_a() { for f in "${INPUTS[@]}"; do $PY bench/tokenize_peer.py internlm $MODEL "$f" "$WORK/a_$(basename "$f").bin"; done; }
run_b() { spm_encode --model=$MODEL --output_format=id < "$WORK/all.docs" > "$WORK/b.ids"; }
run_loom() { $TOK --model $MODEL --output-dir "$WORK/loom" --threads "$CORES" "${INPUTS[@]}"; }
run_loom_il() { $TOK --model $MODEL --output-dir "$WORK/il" --format internlm --threads "$CORES" "${INPUTS[@]}"; }
run_loom_1() { $TOK --model $MODEL --output-dir "$WORK/loom1" --threads 1 "${INPUTS[@]}"; }

ta=$(best_of run_a); tb=$(best_of run_b); tl=$(best_of run_loom); ti=$(best_of run_loom_il); t1=$(best_of run_loom_1)
# Same bytes as the Python peer: the comparison is of equal work.
for f in "${INPUTS[@]}"; do cmp -s "$WORK/a_$(basename "$f").bin" "$WORK/il/$(basename "${f%.txt}").bin" || { echo "internlm output differs from the peer: $f"; exit 1; }; done

fmt() { calc "round($1 / $2, 2)"; }
row() { printf "| %s | %.3f | %.2f | %.0f |\n" "$1" "$2" "$(calc "$bytes / $2 / 1e6")" "$(calc "$tokens / $2")"; }
{
  echo
  echo "## tokenize — $(date -u +%Y-%m-%d)"
  echo
  echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- commit: $(git rev-parse --short HEAD)"
  echo "- command: bench/tokenize_bench.sh $BUILD $REPEAT (best of $REPEAT wall times)"
  echo "- input: botchan.txt + wagahaiwa_nekodearu.txt, internlm_v7.model; $bytes bytes of documents, $tokens tokens"
  echo
  echo "| run | seconds | MB/s | tokens/s |"
  echo "| --- | --- | --- | --- |"
  row "(a) InternLM tools/tokenizer.py way (Python, 1 process)" "$ta"
  row "(b) spm_encode, 1 thread (raw SentencePiece)" "$tb"
  row "loom-tokenize --threads 1" "$t1"
  row "loom-tokenize --threads $CORES (loom format)" "$tl"
  row "loom-tokenize --threads $CORES --format internlm" "$ti"
  echo
  echo "Ratios: loom ($CORES threads) / (a) = $(fmt "$ta" "$tl")x (target >= 3.5);" \
       "loom / (b) = $(fmt "$tb" "$tl")x (target >= 0.9 x $CORES = $(calc "0.9 * $CORES"));" \
       "loom --format internlm / (a) = $(fmt "$ta" "$ti")x."
} | tee -a bench/RESULTS.md
