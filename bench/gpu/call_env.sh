# shellcheck shell=bash
# Sourced by bench/gpu/call.sh, from the repository root: the call's
# output folders (OUT, L = OUT/logs), its clock (T0; left prints the seconds left of LOOM_CALL_S,
# default 570), the device's library path and NCCL settings, L/device.txt's first lines,
# build_for_call (scripts/device/build.sh of the named targets, its errors and time in the summary)
# and run_gpu_tests (test_gpu on a filter).
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
