#!/usr/bin/env bash
# Thread scaling of loom-tokenize on this machine, against the machine's own limit, in one call:
#   inputs   tests/data/botchan.txt (English) and wagahaiwa_nekodearu.txt (Japanese) repeated to
#            about SIZE_MB each, in $SCRATCH (default /dev/shm, memory, so the disk is not measured)
#   runs     loom-tokenize --threads 1 (best of REPEAT1) and --threads N (best of REPEAT by wall time)
#            on each, and --threads N --batch-bytes 1048576 (fewer, larger work items)
#   limits   (a) a trivially parallel CPU loop: one Python process alone, then N at once (the
#            machine's limit for independent CPU work: turbo, SMT, shared caches);
#            (b) N independent loom-tokenize --threads 1 processes at once, each on a quarter of the
#            input (the limit for this workload, memory traffic included)
# Figures: speed-up = wall(1 thread) / wall(N threads); a limit = N * wall(one alone) / wall(N at once);
# "of limit" = speed-up / limit. Also CPU seconds of the reading and writing threads (loom-tokenize's
# log) and peak RSS. The .bin of N threads must equal the one of 1 thread (else exit 1).
# Fixed costs do not scale: loading the model (the log's "loaded in", about 0.2 s for InternLM's) and
# the process's start and exit are in both wall times, so a small input understates the speed-up
# of the pipeline itself; the table also gives that one, from the log's "s in the pipeline" (the
# input's read-encode-write, from the first byte read to the last byte written).
# Writes OUT_DIR/tokenize_scaling.md (and the logs beside it). Usage:
#   bench/tokenize_scaling.sh BUILD_DIR OUT_DIR [N]          N defaults to nproc
# Environment: SIZE_MB (600), REPEAT (2), REPEAT1 (1), MODEL (tests/data/internlm_v7.model),
# SCRATCH (/dev/shm; needs about 15 * SIZE_MB free at the peak: inputs, outputs, N limit runs), LOOP
# (6000000: iterations of limit (a)'s Python loop), MANY (64). Also the English text as MANY inputs of one call
# (many small inputs), 1 and N threads. On 16 cores it runs in about 2 minutes (SIZE_MB=600; the
# 1-thread runs take most of it). SIZE_MB=300 halves that; at 300 MB the 16-thread run of the English
# text lasts about 1 s, so the fixed costs above are a quarter of it.
# LOOM_SCALING_DIAG=1 adds, for the English input at 1 and N threads: `perf stat` (task-clock,
# page faults, context switches, migrations), `strace -f -c` (system calls by kind; strace slows
# the run, so only its counts mean anything), `perf record`'s CPU share per thread and busiest
# symbols, and the machine's NUMA layout; each tool that is missing is skipped. Files
# OUT/diag_*.txt and a section at the end of the report (about 1 minute more on 16 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: bench/tokenize_scaling.sh BUILD_DIR OUT_DIR [N]}
OUT=${2:?usage: bench/tokenize_scaling.sh BUILD_DIR OUT_DIR [N]}
N=${3:-$(nproc)}
SIZE_MB=${SIZE_MB:-600}
REPEAT=${REPEAT:-2}
REPEAT1=${REPEAT1:-1}
MODEL=${MODEL:-tests/data/internlm_v7.model}
SCRATCH=${SCRATCH:-/dev/shm}
LOOP=${LOOP:-6000000}
MANY=${MANY:-64}
PY=${PY:-python3}
TOK=$BUILD/tokenize/loom-tokenize
[ -x "$TOK" ] || { echo "build loom-tokenize first ($TOK)" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "$SCRATCH/loom-scaling-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
REPORT=$OUT/tokenize_scaling.md
T0=$(date +%s)

# Inputs: whole copies of the corpus up to SIZE_MB, and a quarter of that for the limit runs.
$PY - "$WORK" "$SIZE_MB" "$MANY" <<'PYEOF'
import sys
work, mb, many = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
for name, src in (("en", "tests/data/botchan.txt"), ("ja", "tests/data/wagahaiwa_nekodearu.txt")):
    d = open(src, "rb").read()
    if not d.endswith(b"\n"):
        d += b"\n"
    n = max(1, int(mb * 1e6 / len(d)))
    open(f"{work}/{name}.txt", "wb").write(d * n)
    open(f"{work}/{name}q.txt", "wb").write(d * max(1, n // 4))
    if name == "en":  # the same text as `many` inputs of whole copies (many small inputs)
        import os
        os.makedirs(f"{work}/many", exist_ok=True)
        for i in range(many):
            open(f"{work}/many/part-{i:02d}.txt", "wb").write(d * max(1, n // many))
PYEOF

# timed CMD: "wall cpu maxrss_mib" of a bash command (its stderr goes to $WORK/last.log).
timed() {
  $PY - "$1" "$WORK/last.log" <<'PYEOF'
import resource, subprocess, sys, time
t0 = time.monotonic()
with open(sys.argv[2], "w") as log:
    subprocess.run(["bash", "-c", sys.argv[1]], check=True, stdout=log, stderr=log)
wall = time.monotonic() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{wall:.3f} {r.ru_utime + r.ru_stime:.3f} {r.ru_maxrss / 1024:.0f}")
PYEOF
}
# best LABEL CMD [TIMES]: best of TIMES (REPEAT) by wall; keeps the log of the best run as $OUT/LABEL.log.
best() {
  local b="" line
  for _ in $(seq "${3:-$REPEAT}"); do
    line=$(timed "$2")
    if [ -z "$b" ] || [ "$($PY -c "print(int(${line%% *} < ${b%% *}))")" = 1 ]; then
      b=$line
      cp "$WORK/last.log" "$OUT/$1.log"
    fi
  done
  echo "$b"
}
threads_cpu() { sed -n 's/.*CPU seconds of the threads: reading \([0-9.]*\), writing \([0-9.]*\),.*/\1 \2/p' "$OUT/$1.log" | tail -1; }
# pipeline_s LABEL: the log's seconds in the pipeline (summed over inputs); load_s LABEL: the model's load.
pipeline_s() { sed -n 's/.*: \([0-9.]*\) s in the pipeline:.*/\1/p' "$OUT/$1.log" | awk '{s += $1} END {printf "%.3f", s}'; }
load_s() { sed -n 's/.*, loaded in \([0-9.]*\) s$/\1/p' "$OUT/$1.log" | tail -1; }
f() { $PY -c "print(f'{$1:.2f}')"; }

# (a) the machine: a CPU-bound Python loop, one process alone, then N at once.
cpu_limit=$($PY - "$N" "$LOOP" <<'PYEOF'
import multiprocessing as mp, sys, time
def work(_):
    s = 0
    for i in range(int(sys.argv[2])):
        s += i * i
    return s
n = int(sys.argv[1])
with mp.Pool(n) as pool:
    pool.map(work, range(n))                  # warm the workers
    t0 = time.monotonic(); pool.map(work, [0]); one = time.monotonic() - t0
    t0 = time.monotonic(); pool.map(work, range(n), chunksize=1); many = time.monotonic() - t0
print(f"{n * one / many:.2f} {one:.3f} {many:.3f}")
PYEOF
)

rows=()
for lang in en ja; do
  in=$WORK/$lang.txt
  mb=$($PY -c "import os; print(f'{os.path.getsize(\"$in\") / 1e6:.1f}')")
  r1=$(best "${lang}_t1" "$TOK --verbose --model $MODEL --output-dir $WORK/o1 --threads 1 $in" "$REPEAT1")
  rn=$(best "${lang}_t$N" "$TOK --verbose --model $MODEL --output-dir $WORK/on --threads $N $in")
  rb=$(best "${lang}_t${N}_b1m" "$TOK --verbose --model $MODEL --output-dir $WORK/ob --threads $N --batch-bytes 1048576 $in")
  for o in on ob; do
    cmp -s "$WORK/o1/$lang.bin" "$WORK/$o/$lang.bin" || { echo "$lang: the .bin of $N threads ($o) differs from 1 thread" >&2; exit 1; }
  done
  # (b) N independent single-thread runs at once, each on a quarter input, against one alone.
  q=$WORK/${lang}q.txt
  one=$(timed "$TOK --model $MODEL --output-dir $WORK/q0 --threads 1 $q")
  many=$(timed "for i in \$(seq $N); do $TOK --model $MODEL --output-dir $WORK/q\$i --threads 1 $q & done; wait")
  rm -rf "$WORK"/q[0-9]*
  wl=$($PY -c "print(f'{$N * ${one%% *} / ${many%% *}:.2f}')")
  s=$($PY -c "print(${r1%% *} / ${rn%% *})")
  sb=$($PY -c "print(${r1%% *} / ${rb%% *})")
  read -r rd1 wr1 <<< "$(threads_cpu "${lang}_t1")"
  read -r rdn wrn <<< "$(threads_cpu "${lang}_t$N")"
  rss1=$(echo "$r1" | cut -d' ' -f3); rssn=$(echo "$rn" | cut -d' ' -f3)
  p1=$(pipeline_s "${lang}_t1"); pn=$(pipeline_s "${lang}_t$N")
  rows+=("| $lang, $mb MB | $(f "${r1%% *}") s | $(f "${rn%% *}") s | $(f "$s")x | $(f "$sb")x | $wl | $(f "$s / $wl") / $(f "$s / ${cpu_limit%% *}") | $(f "$p1 / $pn")x ($p1 / $pn s; load $(load_s "${lang}_t$N") s) | $rd1 + $wr1 / $rdn + $wrn | $rss1 / $rssn MiB |")
done

# Many small inputs: the English text as MANY files in one call.
m1=$(best many_t1 "$TOK --verbose --model $MODEL --output-dir $WORK/m1 --threads 1 $WORK/many" "$REPEAT1")
mn=$(best "many_t$N" "$TOK --verbose --model $MODEL --output-dir $WORK/mn --threads $N $WORK/many")
many_mb=$($PY -c "import glob, os; print(f'{sum(os.path.getsize(p) for p in glob.glob(\"$WORK/many/*\")) / 1e6:.1f}')")
for b in "$WORK"/m1/*.bin; do cmp -s "$b" "$WORK/mn/$(basename "$b")" || { echo "many: $(basename "$b") differs at $N threads" >&2; exit 1; }; done
pm1=$(pipeline_s many_t1); pmn=$(pipeline_s "many_t$N")
rows+=("| en as $MANY inputs, $many_mb MB | $(f "${m1%% *}") s | $(f "${mn%% *}") s | $($PY -c "print(f'{${m1%% *} / ${mn%% *}:.2f}')")x | - | - | - | $(f "$pm1 / $pmn")x ($pm1 / $pmn s) | - | $(echo "$m1" | cut -d' ' -f3) / $(echo "$mn" | cut -d' ' -f3) MiB |")

# Diagnostics (LOOM_SCALING_DIAG=1): where the CPU goes at 1 and N threads on the English input.
diag_summary=()
if [ "${LOOM_SCALING_DIAG:-0}" = 1 ]; then
  in=$WORK/en.txt
  { lscpu 2>/dev/null | grep -iE 'numa|socket|model name|^cpu\(s\)|mhz' || true; } > "$OUT/diag_machine.txt"
  for t in 1 "$N"; do
    cmd=("$TOK" --verbose --model "$MODEL" --output-dir "$WORK/od" --threads "$t" "$in")
    if command -v perf >/dev/null; then
      perf stat -e task-clock,page-faults,context-switches,cpu-migrations -o "$OUT/diag_perf_stat_t$t.txt" -- "${cmd[@]}" 2> "$OUT/diag_log_t$t.txt" || true
      perf record -q -F 499 -o "$WORK/perf_t$t.data" -- "${cmd[@]}" 2>/dev/null >/dev/null || true
      { echo "per thread:"; perf report -i "$WORK/perf_t$t.data" --stdio --no-children --sort pid -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -24
        echo "symbols, all threads:"; perf report -i "$WORK/perf_t$t.data" --stdio --no-children --sort sym -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -40
      } > "$OUT/diag_perf_top_t$t.txt" || true
      rm -f "$WORK/perf_t$t.data"
    else
      "${cmd[@]}" 2> "$OUT/diag_log_t$t.txt" || true
    fi
    if command -v strace >/dev/null; then
      strace -f -c -o "$OUT/diag_strace_t$t.txt" "${cmd[@]}" 2>/dev/null || true
    fi
    rm -rf "$WORK/od"
    ev() { grep -E " $1( |$)" "$OUT/diag_perf_stat_t$t.txt" 2>/dev/null | awk '{print $1}' | head -1; }
    sc() { awk -v k="$1" '$NF == k {print $4}' "$OUT/diag_strace_t$t.txt" 2>/dev/null | head -1; }
    diag_summary+=("| $t | $(ev task-clock) | $(ev page-faults) | $(ev context-switches) | $(ev cpu-migrations) | $(sc futex) | $(sc read) / $(sc write) | $(sc mmap) / $(sc munmap) / $(sc madvise) / $(sc mprotect) | $(grep -o 'CPU seconds of the threads: .*' "$OUT/diag_log_t$t.txt" | sed 's/CPU seconds of the threads: //') |")
  done
fi

{
  echo
  echo "## loom-tokenize thread scaling, $(date -u '+%Y-%m-%d %H:%M') UTC, $N threads"
  echo
  echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- tokenize common 2>/dev/null || echo ' (tokenize/ or common/ modified)'), model $MODEL, inputs in $SCRATCH"
  echo "- command: \`bench/tokenize_scaling.sh $BUILD OUT $N\` (SIZE_MB=$SIZE_MB REPEAT=$REPEAT REPEAT1=$REPEAT1), $(( $(date +%s) - T0 )) s"
  echo "- machine limit (a), a CPU-bound Python loop: $(echo "$cpu_limit" | cut -d' ' -f1)x (one task $(echo "$cpu_limit" | cut -d' ' -f2) s alone, $N at once $(echo "$cpu_limit" | cut -d' ' -f3) s)"
  echo
  echo "| input | 1 thread | $N threads | speed-up | speed-up, --batch-bytes 1 MiB | limit (b): $N loom-tokenize -t 1 | speed-up / limit (b) / (a) | pipeline's own speed-up (log: s in the pipeline, 1 / $N threads; model load at $N) | CPU s reading + writing thread, 1 / $N threads | peak RSS 1 / $N threads |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
  echo
  echo "- the .bin of $N threads equals the one of 1 thread for every input"
  if [ ${#diag_summary[@]} -gt 0 ]; then
    echo
    echo "Diagnostics (LOOM_SCALING_DIAG=1), English input; files diag_*.txt beside this report; NUMA: $(grep -i 'numa node(s)' "$OUT/diag_machine.txt" | cut -d: -f2 | xargs)"
    echo
    echo "| threads | task-clock ms | page faults | context switches | migrations | futex calls | read / write calls | mmap / munmap / madvise / mprotect | CPU s of the threads (log) |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${diag_summary[@]}"
  fi
} > "$REPORT"
cat "$REPORT"
