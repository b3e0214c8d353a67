# Sourced by the one-call scripts (bench/gpu/*_call.sh), from the repository root: the call's
# output folders (OUT, L = OUT/logs), its clock (T0; left prints the seconds left of LOOM_CALL_S,
# default 570), the device's library path and NCCL settings, L/device.txt's first lines,
# build_for_call (scripts/device/build.sh of the named targets, its errors and time in the summary),
# run_gpu_tests (test_gpu on a filter) and build_with_base (the same build for this tree and for an
# older one from build-base/src.tar, at once).
OUT=${OUT:-/tmp/loom-out}
L=$OUT/logs
mkdir -p "$L"
T0=$(date +%s)
left() { echo $(( ${LOOM_CALL_S:-570} - ($(date +%s) - T0) )); }
export LD_LIBRARY_PATH="/tmp/loom-prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# The device's checkout prints its base commit, not the tree's: the caller records the tree's.
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; } | tee "$L/device.txt"

build_for_call() {  # TARGETS...
  LOOM_TARGETS="$*" timeout 300 bash scripts/device/build.sh > "$L/build.log" 2>&1
  echo "build rc=$? at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
  grep -E "error:|FAILED" "$L/build.log" | head -20
}

# Runs build-gpu's test_gpu on a Catch2 filter (within 120 s): its verdict in the summary, the
# failures on stdout, the log in L/gpu_tests.log.
run_gpu_tests() {  # FILTER
  timeout 120 build-gpu/tests/gpu/test_gpu "$1" > "$L/gpu_tests.log" 2>&1
  echo "test_gpu \"$1\" rc=$? at $(( $(date +%s) - T0 )) s: $(grep -E 'test cases|All tests' "$L/gpu_tests.log" | tail -1)" \
    | tee -a "$L/device.txt"
  grep -B2 -A8 FAILED "$L/gpu_tests.log" | head -40
}

# Builds this tree's CURRENT_TARGETS and, in /tmp/loom-base, the older tree of
# build-base/src.tar (here: `git archive BASE > build-base/src.tar`, carried) with BASE_TARGETS,
# both at once; each build's exit code and time in the summary.
build_with_base() {  # "CURRENT_TARGETS" "BASE_TARGETS"
  ROOT=$PWD BASE_TREE=/tmp/loom-base
  mkdir -p /tmp/loom-prefix
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/loom-prefix; done && touch /tmp/loom-prefix/.unpacked
  rm -rf "$BASE_TREE" && mkdir -p "$BASE_TREE" && tar -xf build-base/src.tar -C "$BASE_TREE" && ln -s "$ROOT/.debs" "$BASE_TREE/.debs"
  cp scripts/device/build.sh "$BASE_TREE/scripts/device/build.sh"
  (LOOM_TARGETS="$1" timeout 360 bash scripts/device/build.sh > "$L/build_current.log" 2>&1
   echo "build current rc=$? at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt") &
  (cd "$BASE_TREE" && LOOM_TARGETS="$2" timeout 360 bash scripts/device/build.sh > "$L/build_base.log" 2>&1
   echo "build base rc=$? at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt") &
  wait
  grep -hE "error:|FAILED" "$L"/build_*.log | head -20
}
