#!/usr/bin/env bash
# Does loom-tokenize's memory stay flat as the input grows? tests/data/botchan.txt repeated to
# SMALL_GB and to GB gigabytes in SCRATCH, each tokenized with --threads N (default nproc);
# prints peak RSS and throughput of both, and the ratio of the peaks (flat: ~1).
# The outputs are deleted as soon as they are measured. Needs GB + GB/2 of free space in SCRATCH.
# Usage: bench/tokenize_rss.sh BUILD_DIR [GB] [N]     Environment: SMALL_GB (0.5), SCRATCH (/tmp),
# MODEL (tests/data/internlm_v7.model)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: bench/tokenize_rss.sh BUILD_DIR [GB] [N]}
GB=${2:-4}
N=${3:-$(nproc)}
SMALL_GB=${SMALL_GB:-0.5}
SCRATCH=${SCRATCH:-/tmp}
MODEL=${MODEL:-tests/data/internlm_v7.model}
TOK=$BUILD/tokenize/loom-tokenize
[ -x "$TOK" ] || { echo "build loom-tokenize first ($TOK)" >&2; exit 1; }
WORK=$(mktemp -d "$SCRATCH/loom-rss-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "| input | threads | wall s | MB/s | peak RSS MiB |"
echo "| --- | ---: | ---: | ---: | ---: |"
declare -A rss
for size in "$SMALL_GB" "$GB"; do
  python3 - "$WORK/in.txt" "$size" <<'PY'
import sys
path, gb = sys.argv[1], float(sys.argv[2])
d = open("tests/data/botchan.txt", "rb").read()
d = d if d.endswith(b"\n") else d + b"\n"
with open(path, "wb") as f:
    for _ in range(max(1, int(gb * 1e9 / len(d)))):
        f.write(d)
PY
  bytes=$(stat -c %s "$WORK/in.txt")
  # Wall seconds and the child's peak RSS in KiB (getrusage, what /usr/bin/time reports, without it).
  if ! m=$(python3 - "$WORK/log" "$TOK" --model "$MODEL" --output-dir "$WORK/out" --threads "$N" "$WORK/in.txt" <<'PY'
import resource, subprocess, sys, time
t0 = time.monotonic()
with open(sys.argv[1], "w") as log:
    rc = subprocess.run(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT).returncode
print(f"{time.monotonic() - t0:.2f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
sys.exit(rc)
PY
  ); then
    tail -5 "$WORK/log" >&2
    exit 1
  fi
  read -r wall kib <<< "$m"
  rss[$size]=$((kib / 1024))
  echo "| $(python3 -c "print(f'{$bytes / 1e9:.2f} GB')") | $N | $wall | $(python3 -c "print(f'{$bytes / 1e6 / $wall:.0f}')") | ${rss[$size]} |"
  rm -rf "$WORK/out" "$WORK/in.txt"
done
echo
echo "peak RSS at $GB GB / at $SMALL_GB GB: $(python3 -c "print(f'{${rss[$GB]} / ${rss[$SMALL_GB]}:.2f}')")"
