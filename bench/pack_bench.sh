#!/usr/bin/env bash
# loom-pack throughput against the bounds of the same bytes, with a warm page cache for all:
#   cat FILE > /dev/null       vs  loom-pack verify --deep FILE       (target >= 0.7x)
#   cp FILE OUT/ (tmpfs)       vs  loom-pack pack --strategy concat   (target >= 0.5x)
#                              vs  loom-pack pack --strategy bestfit  (target >= 0.3x)
# Each pair runs interleaved (bound, then loom-pack) RUNS times on the same output filesystem
# (/dev/shm), and the medians are reported: the machine is shared, so a pair sees the same load.
# Ratio = bound seconds / loom-pack seconds. The shard (synthetic uint16 ids, lengths ~ geometric
# around 1000 tokens, written by numpy as docs/FORMAT.md specifies) and all outputs are deleted.
#
# usage: bench/pack_bench.sh [BUILD_DIR] [GB]     (defaults: build-pack, 1.0; RUNS=7)
# Appends its section to bench/history/log.md (LOOM_BENCH_LOG); the short mode only prints its own.
#
# Short real documents, where the cost per document shows:
#        bench/pack_bench.sh BUILD_DIR short [MB]  (default 150; RUNS=7; needs loom-tokenize too)
#   tests/data/botchan.txt (English) and wagahaiwa_nekodearu.txt (Japanese), one line a document,
#   tokenized by loom-tokenize with tests/data/internlm_v7.model (vocab 103168: uint32 ids, bos and
#   eos added; median ~19 tokens a document), the shard merged with copies of itself (loom-pack
#   merge) to >= MB megabytes on /dev/shm. cp / pack concat and cp / pack bestfit (seq-len 2048)
#   alternate RUNS times; medians and min-max spreads are reported (targets 0.8 and 0.5).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-pack}
GB=${2:-1.0}
PACK="$BUILD/packer/loom-pack"
PY=${PY:-/usr/bin/python3}
RUNS=${RUNS:-7}
LOG=${LOOM_BENCH_LOG:-bench/history/log.md}
[ -x "$PACK" ] || { echo "build loom-pack first: ninja -C $BUILD loom-pack" >&2; exit 2; }

secs() {  # wall seconds of "$@"
  local t0 t1
  t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.4f", $2-$1}'
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
spread() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END{printf "%s-%s", a[1], a[NR]}'; }

if [ "$GB" = short ]; then
  MB=${3:-150}
  TOK="$BUILD/tokenize/loom-tokenize"
  [ -x "$TOK" ] || { echo "build loom-tokenize first: ninja -C $BUILD loom-tokenize" >&2; exit 2; }
  FAST=$(mktemp -d /dev/shm/loom_pack_short.XXXXXX 2>/dev/null || mktemp -d "$BUILD/pack_short.XXXXXX")
  trap 'rm -rf "$FAST"' EXIT
  "$TOK" --model tests/data/internlm_v7.model --output-dir "$FAST/tok" tests/data/botchan.txt \
    tests/data/wagahaiwa_nekodearu.txt >/dev/null 2>&1
  "$PACK" merge --output "$FAST/short.bin" "$FAST/tok/botchan.bin" "$FAST/tok/wagahaiwa_nekodearu.bin" >/dev/null 2>&1
  rm -rf "$FAST/tok"
  while [ $(($(stat -c %s "$FAST/short.bin") / 1000000)) -lt "$MB" ]; do  # doubling: merge two names of one shard
    mkdir -p "$FAST/two"
    for c in a b; do ln "$FAST/short.bin" "$FAST/two/$c.bin"; ln "$FAST/short.bin.meta" "$FAST/two/$c.bin.meta"; done
    "$PACK" merge --output "$FAST/next.bin" "$FAST/two/a.bin" "$FAST/two/b.bin" >/dev/null 2>&1
    rm -rf "$FAST/two" "$FAST/short.bin" "$FAST/short.bin.meta"
    mv "$FAST/next.bin" "$FAST/short.bin"; mv "$FAST/next.bin.meta" "$FAST/short.bin.meta"
  done
  SHARD="$FAST/short.bin"
  BYTES=$(stat -c %s "$SHARD")
  STATS=$("$PACK" stats "$SHARD" 2>/dev/null)
  # Only the copy or the pack is timed; outputs are deleted between runs, untimed. shellcheck
  # cannot see the calls through secs "$@".
  # shellcheck disable=SC2317
  cp_file() { cp "$SHARD" "$FAST/copy.bin"; }
  # shellcheck disable=SC2317
  pack() { "$PACK" pack --seq-len 2048 --strategy "$1" --seed 1 --output-dir "$FAST/out" "$SHARD"; }
  # shellcheck disable=SC2317
  clean() { rm -rf "$FAST/copy.bin" "$FAST/out"; }
  "$PACK" verify --deep "$SHARD" >/dev/null
  cat "$SHARD" > /dev/null
  declare -A T
  for _ in $(seq "$RUNS"); do
    T[cp1]+=" $(secs cp_file)"; clean; T[concat]+=" $(secs pack concat)"; clean
    T[cp2]+=" $(secs cp_file)"; clean; T[bestfit]+=" $(secs pack bestfit)"; clean
  done
  declare -A M S
  for k in "${!T[@]}"; do M[$k]=$(echo "${T[$k]}" | median); S[$k]=$(echo "${T[$k]}" | spread); done
  ratio() { awk -v bound="$1" -v t="$2" 'BEGIN{printf "%.2f", bound/t}'; }
  CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
  {
    echo "- machine: $(nproc) cores ($CPU), $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr)"
    echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet -- packer common || echo ' (+ uncommitted changes)')"
    echo "- command: \`RUNS=$RUNS bash bench/pack_bench.sh $BUILD short $MB\` (cp and pack alternate, $RUNS runs each, wall time of the command alone, medians, min-max; all on /dev/shm)"
    echo "- input: $(awk -v b="$BYTES" 'BEGIN{printf "%.0f MB", b/1e6}') uint32 shard, botchan + wagahaiwa_nekodearu lines replicated; $(echo "$STATS" | grep -m1 '^total' | cut -d, -f2-3 | sed 's/^ //'); $(echo "$STATS" | grep -m1 'document length')"
    echo
    echo "| pair | cp s (min-max) | loom-pack s (min-max) | ratio | target |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    echo "| \`cp\` / \`pack --seq-len 2048 --strategy concat\` | ${M[cp1]} (${S[cp1]}) | ${M[concat]} (${S[concat]}) | $(ratio "${M[cp1]}" "${M[concat]}") | 0.8 |"
    echo "| \`cp\` / \`pack --seq-len 2048 --strategy bestfit\` | ${M[cp2]} (${S[cp2]}) | ${M[bestfit]} (${S[bestfit]}) | $(ratio "${M[cp2]}" "${M[bestfit]}") | 0.5 |"
    echo
    echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
  }
  exit 0
fi
WORK=$(mktemp -d "$BUILD/pack_bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SHARD="$WORK/synth.bin"

echo "generating a ${GB} GB shard at $SHARD" >&2
"$PY" - "$SHARD" "$GB" <<'PYEOF'
import sys, numpy as np, xxhash
path, gb = sys.argv[1], float(sys.argv[2])
vocab, total = 50000, int(gb * 1e9) // 2          # uint16 ids
rng = np.random.default_rng(1234)
lens = rng.geometric(1 / 1000, size=total // 500 + 10).astype(np.uint64)
offsets = np.concatenate([[0], np.cumsum(lens)])
n = int(np.searchsorted(offsets, total))           # documents until `total` tokens
offsets = offsets[: n + 1].copy(); offsets[-1] = total
h = xxhash.xxh64()
with open(path, "wb") as f:
    chunk = 1 << 26
    for start in range(0, total, chunk):
        ids = rng.integers(0, vocab, size=min(chunk, total - start), dtype=np.uint16)
        b = ids.tobytes(); h.update(b); f.write(b)
hdr = np.zeros(128, dtype=np.uint8)
hdr[:8] = np.frombuffer(b"LOOMTOK\0", dtype=np.uint8)
hdr[8:40].view("<u4")[:] = [1, 128, 2, vocab, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0]   # bos/eos -1
hdr[40:80].view("<u8")[:] = [n, total, h.intdigest(), xxhash.xxh64(offsets.astype("<u8").tobytes()).intdigest(), 0]
with open(path + ".meta", "wb") as f:
    f.write(hdr.tobytes()); f.write(offsets.astype("<u8").tobytes())
PYEOF
BYTES=$(stat -c %s "$SHARD")
FAST=$(mktemp -d /dev/shm/loom_pack_bench.XXXXXX 2>/dev/null || mktemp -d "$BUILD/pack_bench_fast.XXXXXX")
trap 'rm -rf "$WORK" "$FAST"' EXIT

cat_file() { cat "$SHARD" > /dev/null; }
cp_file() { cp "$SHARD" "$FAST/copy.bin"; rm -f "$FAST/copy.bin"; }
verify() { "$PACK" verify --deep "$SHARD"; }
pack() { rm -rf "$FAST/out"; "$PACK" pack --seq-len 2048 --strategy "$1" --seed 1 --output-dir "$FAST/out" "$SHARD"; rm -rf "$FAST/out"; }

"$PACK" verify --deep "$SHARD" >/dev/null   # must pass; also warms the cache
cat "$SHARD" > /dev/null
declare -A T
for _ in $(seq "$RUNS"); do
  T[cat]+=" $(secs cat_file)"; T[verify]+=" $(secs verify)"
  T[cp1]+=" $(secs cp_file)"; T[concat]+=" $(secs pack concat)"
  T[cp2]+=" $(secs cp_file)"; T[bestfit]+=" $(secs pack bestfit)"
done
declare -A M
for k in "${!T[@]}"; do M[$k]=$(echo "${T[$k]}" | median); done

gbs() { awk -v b="$BYTES" -v t="$1" 'BEGIN{printf "%.2f", b/t/1e9}'; }
ratio() { awk -v bound="$1" -v t="$2" 'BEGIN{printf "%.2f", bound/t}'; }
CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
MEM=$(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)
{
  echo
  echo "### loom-pack throughput against cat and cp, $(date -u +%Y-%m-%d)"
  echo
  echo "- machine: $(nproc) cores ($CPU), $MEM RAM, $(uname -sr); shared with other builds"
  echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet -- packer common || echo ' (+ uncommitted changes)')"
  echo "- command: \`bash bench/pack_bench.sh $BUILD $GB\` (each pair interleaved, $RUNS runs, medians; outputs on /dev/shm)"
  echo "- input: $(awk -v b="$BYTES" 'BEGIN{printf "%.2f GB", b/1e9}') loom shard, uint16, synthetic ids, documents ~ geometric(mean 1000 tokens)"
  echo
  echo "| pair | bound s | loom-pack s | loom-pack GB/s | ratio | target |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
  echo "| \`cat FILE > /dev/null\` / \`verify --deep FILE\` | ${M[cat]} | ${M[verify]} | $(gbs "${M[verify]}") | $(ratio "${M[cat]}" "${M[verify]}") | 0.7 |"
  echo "| \`cp FILE /dev/shm/\` / \`pack --seq-len 2048 --strategy concat\` | ${M[cp1]} | ${M[concat]} | $(gbs "${M[concat]}") | $(ratio "${M[cp1]}" "${M[concat]}") | 0.5 |"
  echo "| \`cp FILE /dev/shm/\` / \`pack --seq-len 2048 --strategy bestfit\` | ${M[cp2]} | ${M[bestfit]} | $(gbs "${M[bestfit]}") | $(ratio "${M[cp2]}" "${M[bestfit]}") | 0.3 |"
  echo
  echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
} | tee -a "$LOG"
