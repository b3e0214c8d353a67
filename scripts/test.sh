#!/usr/bin/env bash
# Builds loom and runs the whole test suite (CTest + Catch2). Extra args go to ctest
# (e.g. -L unit, -R tokenize). GPU tests (label gpu) are skipped where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest -j "$(nproc)" --output-on-failure -LE gpu "$@"
