#!/usr/bin/env bash
# Configures and builds loom into build/ (Release, warnings as errors). Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_WARNINGS_AS_ERRORS=ON "$@" >/dev/null
cmake --build build -j "$(nproc)"
