#!/usr/bin/env bash
# Run ON THE GPU MACHINE, in one device call: build loom against the image's LibTorch + CUDA
# (build.sh), run the GPU tests (CTest label gpu) and the fast path's CPU unit tests, then the
# benchmark (bench/gpu/run.sh) unless LOOM_BENCH=0. Logs and figures go to $OUT (what the device
# tool brings back: at most 8 files), so a failing step still reports.
#
# From the CPU machine, once: bash scripts/device/fetch_debs.sh; then the device tool runs
#   bash scripts/device/run.sh          with carry [".debs"]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/loom-out}
mkdir -p "$OUT"
# Never let NCCL/PyTorch use NVLink multicast on the shared hosts (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="/tmp/loom-prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1

{
  date -u +%FT%TZ
  git log -1 --format='commit %H %s' 2>/dev/null || echo "commit unknown"
  git status --short 2>/dev/null | head -20
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  nvcc --version | tail -1
} > "$OUT/device.txt" 2>&1

T0=$(date +%s)
LOOM_TARGETS=${LOOM_TARGETS:-"test_gpu test_trainer loom-train"} bash scripts/device/build.sh > "$OUT/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - T0 )) s" | tee -a "$OUT/device.txt"
grep -E "error|FAILED" "$OUT/build.log" | head -40

ctest --test-dir build-gpu -L gpu --output-on-failure > "$OUT/tests.log" 2>&1
echo "gpu tests rc=$?" | tee -a "$OUT/device.txt"
# The CPU counterparts of the fast path (fused AdamW's reference path, chunked loss) in this build.
ctest --test-dir build-gpu -R 'test_trainer:(adamw_step|chunked loss|compute_chunked_loss)' --output-on-failure >> "$OUT/tests.log" 2>&1
echo "fast-path unit tests rc=$?" | tee -a "$OUT/device.txt"
grep -E "tests passed|Failed|FAILED|\*\*\*" "$OUT/tests.log" | head -30

if [ "${LOOM_BENCH:-1}" != 0 ]; then
  bash bench/gpu/run.sh "$OUT" > "$OUT/bench.log" 2>&1
  echo "bench rc=$?" | tee -a "$OUT/device.txt"
  cat "$OUT/bench.jsonl" 2>/dev/null
fi
cat "$OUT/device.txt"
