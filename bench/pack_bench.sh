#!/usr/bin/env bash
# loom-pack throughput against the memory/disk bound: on one >= 1 GB loom shard, in the same run and
# with a warm page cache for all, times
#   cat FILE > /dev/null                 (the bound: reading the same bytes)
#   loom-pack verify --deep FILE         (ids < vocab + XXH64 of the .bin)
#   loom-pack pack --strategy concat|bestfit (reads every token, writes a packed shard of ~ the same
#                                         size), once into tmpfs (/dev/shm: the CPU path, fsync is free)
#                                         and once onto the disk next to the input
#   dd if=/dev/zero bs=1M conv=fsync     (the disk's write bound, which pack onto disk cannot beat)
# and appends GB/s and the ratios to bench/RESULTS.md. GB/s = input .bin bytes / wall seconds
# (best of RUNS). The shard (synthetic ids, lengths ~ geometric around 1000 tokens, written by
# numpy as docs/FORMAT.md specifies) and all outputs are deleted at the end.
#
# usage: bench/pack_bench.sh [BUILD_DIR] [GB]     (defaults: build-pack, 1.0)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-pack}
GB=${2:-1.0}
PACK="$BUILD/packer/loom-pack"
PY=/usr/bin/python3
RUNS=${RUNS:-3}
[ -x "$PACK" ] || { echo "build loom-pack first: ninja -C $BUILD loom-pack" >&2; exit 2; }
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

best() {  # best wall seconds of RUNS runs of "$@"
  local b=""
  for _ in $(seq "$RUNS"); do
    local t0 t1
    t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N)
    b=$(echo "$t0 $t1 $b" | awk '{d=$2-$1; if ($3=="" || d<$3) print d; else print $3}')
  done
  echo "$b"
}
cat_file() { cat "$SHARD" > /dev/null; }
verify() { "$PACK" verify --deep "$SHARD"; }
FAST=$(mktemp -d /dev/shm/loom_pack_bench.XXXXXX 2>/dev/null || mktemp -d "$BUILD/pack_bench_fast.XXXXXX")
trap 'rm -rf "$WORK" "$FAST"' EXIT
pack() { "$PACK" pack --seq-len 2048 --strategy "$1" --seed 1 --output-dir "$2" "$SHARD"; }
dd_write() { dd if=/dev/zero of="$WORK/dd" bs=1M count=$((BYTES / 1048576)) conv=fsync; rm -f "$WORK/dd"; }

"$PACK" verify --deep "$SHARD" >/dev/null   # must pass; also warms the cache
cat "$SHARD" > /dev/null
T_CAT=$(best cat_file)
T_VERIFY=$(best verify)
T_CONCAT=$(best pack concat "$FAST/out")
T_BESTFIT=$(best pack bestfit "$FAST/out")
rm -rf "$FAST/out"
T_DD=$(RUNS=1 best dd_write)
T_CONCAT_DISK=$(RUNS=1 best pack concat "$WORK/out")
rm -rf "$WORK/out"

gbs() { awk -v b="$BYTES" -v t="$1" 'BEGIN{printf "%.2f", b/t/1e9}'; }
ratio() { awk -v a="$1" -v c="$T_CAT" 'BEGIN{printf "%.2f", c/a}'; }
CPU=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
MEM=$(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)
{
  echo
  echo "### loom-pack throughput, $(date -u +%Y-%m-%d)"
  echo
  echo "- machine: $(nproc) cores ($CPU), $MEM RAM, $(uname -sr)"
  echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet -- packer common || echo ' (+ uncommitted changes)')"
  echo "- command: \`bash bench/pack_bench.sh $BUILD $GB\` (best of $RUNS, warm page cache)"
  echo "- input: $(awk -v b="$BYTES" 'BEGIN{printf "%.2f GB", b/1e9}') loom shard, uint16, synthetic ids, documents ~ geometric(mean 1000 tokens)"
  echo
  echo "| command | seconds | GB/s | x of cat |"
  echo "| --- | ---: | ---: | ---: |"
  echo "| \`cat FILE > /dev/null\` (bound) | $T_CAT | $(gbs "$T_CAT") | 1.00 |"
  echo "| \`loom-pack verify --deep FILE\` | $T_VERIFY | $(gbs "$T_VERIFY") | $(ratio "$T_VERIFY") |"
  echo "| \`loom-pack pack --seq-len 2048 --strategy concat\`, output on tmpfs | $T_CONCAT | $(gbs "$T_CONCAT") | $(ratio "$T_CONCAT") |"
  echo "| \`loom-pack pack --seq-len 2048 --strategy bestfit\`, output on tmpfs | $T_BESTFIT | $(gbs "$T_BESTFIT") | $(ratio "$T_BESTFIT") |"
  echo "| \`dd if=/dev/zero bs=1M conv=fsync\` onto the disk (write bound) | $T_DD | $(gbs "$T_DD") | $(ratio "$T_DD") |"
  echo "| \`loom-pack pack --seq-len 2048 --strategy concat\`, output on the disk | $T_CONCAT_DISK | $(gbs "$T_CONCAT_DISK") | $(ratio "$T_CONCAT_DISK") |"
  echo
  echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared; cat and loom-pack ran back to back under the same load)."
} | tee -a bench/RESULTS.md
