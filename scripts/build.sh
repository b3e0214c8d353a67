#!/usr/bin/env bash
# Configures and builds loom into build/ (Release, warnings as errors). Extra args go to cmake.
# LOOM_BUILD_TARGETS: build only these targets (scripts/demo.sh: the three tools, not the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_WARNINGS_AS_ERRORS=ON "$@" >/dev/null
# shellcheck disable=SC2086  # the targets are words
cmake --build build -j "$(nproc)" ${LOOM_BUILD_TARGETS:+--target $LOOM_BUILD_TARGETS}
