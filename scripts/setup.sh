#!/usr/bin/env bash
# Installs every package loom needs, from Debian only. Idempotent: a second run installs nothing.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config ccache
  libsentencepiece-dev sentencepiece libsimdjson-dev libzstd-dev zlib1g-dev zstd
  libboost-program-options-dev catch2 python3 python3-numpy python3-sentencepiece
  libtorch-dev libgloo-dev python3-torch python3-xxhash python3-matplotlib
  # Debian's LibTorch calls BLAS through libblas.so.3; without an optimised provider that is the
  # reference BLAS, 16x slower on matmuls. OpenBLAS's OpenMP flavour shares torch's OpenMP threads.
  libopenblas0-openmp
  # scripts/fuzz.sh: clang with libFuzzer and the sanitizer runtimes, llvm-symbolizer for stacks.
  clang llvm libclang-rt-dev
  # tests/bench: every benchmark script is shellchecked.
  shellcheck
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#pkgs[@]} packages present"
  exit 0
fi
log=${LOOM_SETUP_LOG:-${TMPDIR:-/tmp}/loom-setup.log}
echo "setup: installing ${#missing[@]} packages: ${missing[*]} (apt's output: $log)"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
phase() {  # name command...: one line per phase; apt's output goes to the log, and its tail on failure
  local name=$1
  shift
  if ! "$@" >> "$log" 2>&1; then
    echo "setup: $name failed; the end of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  echo "setup: $name done"
}
: > "$log"
phase "apt-get update" $SUDO apt-get update -qq
phase "apt-get install" $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
