#!/usr/bin/env bash
# The libFuzzer targets of fuzz/ (one per reader of outside bytes), in their own clang build with
# ASan and UBSan (build-fuzz/, or $LOOM_FUZZ_BUILD):
#
#   scripts/fuzz.sh                      build, then ctest -L fuzz: each target a few seconds on its seeds
#   scripts/fuzz.sh run [-t SECONDS] [-j JOBS] [TARGET...]
#                                        long runs, one target after another (all by default), each
#                                        for SECONDS (default 60) with JOBS processes (default 1)
#
# Long runs keep their corpus in fuzz-out/corpus/TARGET (seeded from fuzz/corpus/TARGET, grown
# across runs), crash inputs in fuzz-out/crashes/TARGET/, libFuzzer's log in fuzz-out/logs/; each
# target ends with one line: executions, corpus size, crashes. Exit 1 when any target crashed.
# A crash input replays with: build-fuzz/fuzz/TARGET fuzz-out/crashes/TARGET/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LOOM_FUZZ_BUILD:-build-fuzz}
out=fuzz-out

cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLOOM_FUZZ=ON -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_TRAINER=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target loom_fuzz_all

if [ "${1:-}" != run ]; then
  cd "$build"
  exec ctest -j "$(nproc)" --output-on-failure -L fuzz
fi
shift
seconds=60
jobs=1
while getopts "t:j:" o; do
  case $o in
    t) seconds=$OPTARG ;;
    j) jobs=$OPTARG ;;
    *) echo "usage: scripts/fuzz.sh run [-t SECONDS] [-j JOBS] [TARGET...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
for t in "${targets[@]}"; do
  bin=$build/fuzz/$t
  [ -x "$bin" ] || { echo "fuzz: no target $t in $build/fuzz" >&2; exit 2; }
  mkdir -p "$out/corpus/$t" "$out/crashes/$t" "$out/logs"
  log=$out/logs/$t.log
  rc=0
  # -fork keeps fuzzing past a crash (each crash input saved), with JOBS processes at a time.
  "$bin" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -max_total_time="$seconds" \
    -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/crashes/$t/" \
    "$out/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  # Fork mode's last status line: "#N: cov: C ft: F corp: K exec/s: E oom/timeout/crash: a/b/c time: T".
  execs=$(grep -o "^#[0-9]*: cov" "$log" | tail -1 | tr -dc 0-9)
  crashes=$(find "$out/crashes/$t" -type f | wc -l)
  corpus=$(find "$out/corpus/$t" -type f | wc -l)
  echo "fuzz: $t: ${execs:-?} executions in ${seconds}s, corpus $corpus, crash inputs $crashes (log $log)"
  if [ "$crashes" -gt 0 ] || [ "$rc" -ne 0 ]; then failed=1; fi
done
exit $failed
