#!/usr/bin/env bash
# loom-tokenize against its peers on the same documents, in one run:
#   (a) InternLM's tools/tokenizer.py way (Python, one process)      bench/tokenize_peer.py internlm
#   (b) raw single-thread SentencePiece encode (C++, Debian's spm_encode --output_format=id)
#   loom-tokenize with all cores, --format loom and --format internlm; with one thread, with loom's
#   encoder (the default) and with --encoder sentencepiece
#   loom's encoder against libsentencepiece per core, side by side in one process on each corpus
#   (bench/spm_encode_bench: median thread CPU time of ROUNDS interleaved rounds)
# Figures: MB/s = bytes of document text (stripped non-empty lines) / wall seconds; tokens/s =
# tokens written (loom's count, BOS+EOS included) / wall seconds. Best of REPEAT runs each.
# Appends a section to bench/history/log.md (LOOM_BENCH_LOG). Usage: bench/tokenize_bench.sh [BUILD_DIR] [REPEAT] [ROUNDS]
# Inputs default to tests/data (MODEL=... and INPUTS="a.txt b.txt" in the environment override them).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEAT=${2:-3}
ROUNDS=${3:-9}
PY=/usr/bin/python3
LOG=${LOOM_BENCH_LOG:-bench/history/log.md}
TOK=$BUILD/tokenize/loom-tokenize
MODEL=${MODEL:-tests/data/internlm_v7.model}
read -r -a INPUTS <<< "${INPUTS:-tests/data/botchan.txt tests/data/wagahaiwa_nekodearu.txt}"
CORES=$(nproc)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -x "$TOK" ] || { echo "build loom-tokenize first ($TOK)"; exit 1; }
[ -x "$BUILD/bench/spm_encode_bench" ] || { echo "build spm_encode_bench first ($BUILD/bench/spm_encode_bench)"; exit 1; }

now() { date +%s.%N; }
calc() { $PY -c "print($1)"; }
# best_of FUNC: "wall cpu" seconds of the run with the smallest wall time (of REPEAT runs); cpu =
# user+sys of the run's processes, which stays meaningful when other jobs share the cores.
timed() {
  $PY - "$@" <<'PYEOF'
import os, resource, subprocess, sys, time
t0 = time.monotonic()
subprocess.run(["bash", "-c", sys.argv[1]], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ)
wall = time.monotonic() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{wall:.4f} {r.ru_utime + r.ru_stime:.4f}")
PYEOF
}
best_of() {
  local best="" line
  for _ in $(seq "$REPEAT"); do
    line=$(timed "$(declare -f "$1"); $1")
    if [ -z "$best" ] || [ "$(calc "int(${line% *} < ${best% *})")" = 1 ]; then best=$line; fi
  done
  echo "$best"
}

LOAD0=$(cut -d' ' -f1 /proc/loadavg)
bytes=0
for f in "${INPUTS[@]}"; do
  n=$($PY bench/tokenize_peer.py docs "$f" "$WORK/$(basename "$f").docs")
  bytes=$((bytes + n))
done
cat "$WORK"/*.docs > "$WORK/all.docs"
# The summary line writes counts with thousands separators ("4,288 docs, 74,345 tokens").
tokens=$($TOK --model "$MODEL" --output-dir "$WORK/count" "${INPUTS[@]}" 2>&1 | sed -n 's/.* docs, \([0-9,]*\) tokens, .*/\1/p' | tail -1 | tr -d ,)
[ -n "$tokens" ] || { echo "no token count in loom-tokenize's summary line" >&2; exit 1; }

# The run_* functions execute in a fresh bash (timed): they see exported scalars only, so the
# inputs travel as one space-separated INPUT_LIST, read back into an array where they are used.
export PY MODEL TOK CORES WORK INPUT_LIST="${INPUTS[*]}"
run_a() { read -r -a in <<< "$INPUT_LIST"; for f in "${in[@]}"; do $PY bench/tokenize_peer.py internlm "$MODEL" "$f" "$WORK/a_$(basename "$f").bin"; done; }
run_b() { spm_encode --model="$MODEL" --output_format=id < "$WORK/all.docs" > "$WORK/b.ids"; }
run_loom() { read -r -a in <<< "$INPUT_LIST"; $TOK --model "$MODEL" --output-dir "$WORK/loom" --threads "$CORES" "${in[@]}"; }
run_loom_il() { read -r -a in <<< "$INPUT_LIST"; $TOK --model "$MODEL" --output-dir "$WORK/il" --format internlm --threads "$CORES" "${in[@]}"; }
run_loom_1() { read -r -a in <<< "$INPUT_LIST"; $TOK --model "$MODEL" --output-dir "$WORK/loom1" --threads 1 "${in[@]}"; }
run_loom_1_sp() { read -r -a in <<< "$INPUT_LIST"; $TOK --model "$MODEL" --output-dir "$WORK/loom1sp" --encoder sentencepiece --threads 1 "${in[@]}"; }

ra=$(best_of run_a); rb=$(best_of run_b); rl=$(best_of run_loom); ri=$(best_of run_loom_il); r1=$(best_of run_loom_1); r1s=$(best_of run_loom_1_sp)
ta=${ra% *}; tb=${rb% *}; tl=${rl% *}; ti=${ri% *}
# Same bytes as the Python peer: the comparison is of equal work.
for f in "${INPUTS[@]}"; do cmp -s "$WORK/a_$(basename "$f").bin" "$WORK/il/$(basename "${f%.txt}").bin" || { echo "internlm output differs from the peer: $f"; exit 1; }; done

fmt() { calc "round($1 / $2, 2)"; }
row() { printf "| %s | %.3f | %.2f | %.0f | %.3f | %.0f |\n" "$1" "${2% *}" "$(calc "$bytes / ${2% *} / 1e6")" "$(calc "$tokens / ${2% *}")" "${2#* }" "$(calc "$tokens / ${2#* }")"; }
{
  echo
  echo "## tokenize — $(date -u +%Y-%m-%d)"
  echo
  echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- commit: $(git rev-parse --short HEAD)"
  echo "- command: bench/tokenize_bench.sh $BUILD $REPEAT $ROUNDS (best of $REPEAT wall times)"
  echo "- input: ${INPUTS[*]}, $MODEL; $bytes bytes of documents, $tokens tokens"
  echo
  echo "| run | wall s | MB/s | tokens/s | CPU s | tokens per CPU s |"
  echo "| --- | --- | --- | --- | --- | --- |"
  row "(a) InternLM tools/tokenizer.py way (Python, 1 process)" "$ra"
  row "(b) spm_encode, 1 thread (raw SentencePiece)" "$rb"
  row "loom-tokenize --threads 1 (loom's encoder)" "$r1"
  row "loom-tokenize --threads 1 --encoder sentencepiece" "$r1s"
  row "loom-tokenize --threads $CORES (loom format)" "$rl"
  row "loom-tokenize --threads $CORES --format internlm" "$ri"
  echo
  echo "Ratios: loom ($CORES threads) / (a) = $(fmt "$ta" "$tl")x (target >= 3.5);" \
       "loom / (b) = $(fmt "$tb" "$tl")x (target >= 0.9 x $CORES = $(calc "0.9 * $CORES"));" \
       "loom --format internlm / (a) = $(fmt "$ta" "$ti")x."
  echo "Per CPU second: loom / (a) = $(fmt "${rl#* }" "${ra#* }" | $PY -c "print(round(1/float(input()), 2))")x," \
       "loom / (b) = $(fmt "${rl#* }" "${rb#* }" | $PY -c "print(round(1/float(input()), 2))")x."
  echo "One thread, per CPU second (reader and writer included): loom's encoder / --encoder sentencepiece =" \
       "$(fmt "${r1s#* }" "${r1#* }")x."
  echo
  echo "loom's encoder against libsentencepiece, one core, $BUILD/bench/spm_encode_bench MODEL TEXT $ROUNDS:"
  echo
  echo '```'
  for f in "${INPUTS[@]}"; do "$BUILD/bench/spm_encode_bench" "$MODEL" "$f" "$ROUNDS"; done
  echo '```'
  if [ "$(calc "int($LOAD0 > $CORES)")" = 1 ]; then
    echo
    echo "Note: the machine was shared while this ran (load average $LOAD0 on $CORES cores), so the"
    echo "processes got a fraction of a core each: wall-clock figures and the parallel speedup are not"
    echo "representative; the CPU-second columns compare the work each tool does."
  fi
} | tee -a "$LOG"
