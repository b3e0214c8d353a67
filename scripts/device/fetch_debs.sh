#!/usr/bin/env bash
# Run HERE (Debian 12): downloads the Debian packages the GPU image lacks into .debs/ (git-ignored),
# for the device tool to carry (`carry: [".debs"]`). build.sh unpacks them there. libgloo-dev: the
# headers c10d's ProcessGroupGloo.hpp includes (the torch wheel ships none; only headers are needed).
# sentencepiece: spm_encode, the reference of bench/short_docs_bench.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .debs
cd .debs
apt-get download \
  libboost-program-options1.74-dev libboost-program-options1.74.0 libboost1.74-dev \
  libboost-program-options-dev libsimdjson-dev libsimdjson14 catch2 \
  libsentencepiece-dev libsentencepiece0 sentencepiece libzstd-dev zlib1g-dev \
  libgloo-dev 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
ls -la
