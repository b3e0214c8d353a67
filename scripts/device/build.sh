#!/usr/bin/env bash
# Run ON THE GPU MACHINE (Ubuntu 24.04 image, LibTorch 2.x + CUDA in /opt/torch/.venv): unpacks the
# carried .debs into a scratch prefix, configures loom against the image's LibTorch with CUDA, and
# builds into build-gpu/ (every target, or only those named in LOOM_TARGETS, keeping going past
# failures so one broken file does not hide the others). Usage: bash scripts/device/build.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/../.."
P=/tmp/loom-prefix
mkdir -p "$P"
# Unpacked once per machine: two builds at once (bench/gpu/ab_base.sh) must not rewrite headers
# the other is reading.
if [ ! -f "$P/.unpacked" ]; then
  for f in .debs/*.deb; do dpkg -x "$f" "$P"; done
  touch "$P/.unpacked"
fi
PY=$(command -v python3)
TORCH_PREFIX=$($PY -c 'import torch;print(torch.utils.cmake_prefix_path)')
NCCL_DIR=$($PY -c 'import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__ if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0]))' 2>/dev/null || true)
CUDNN_DIR=$($PY -c 'import nvidia.cudnn as m;print(list(m.__path__)[0])' 2>/dev/null || true)
export LD_LIBRARY_PATH="$P/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$P/usr;$TORCH_PREFIX" -DBoost_NO_SYSTEM_PATHS=ON -DBOOST_ROOT="$P/usr" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DLOOM_CUDA=ON -DLOOM_NCCL_ROOT="$NCCL_DIR" -DLOOM_CUDNN_ROOT="$CUDNN_DIR" "$@"
cmake --build build-gpu -j "$(nproc)" ${LOOM_TARGETS:+--target $LOOM_TARGETS} -- -k 0
