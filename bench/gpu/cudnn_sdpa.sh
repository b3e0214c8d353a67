#!/usr/bin/env bash
# loom's own cuDNN attention graphs alone (trainer/kernels/cuda/cudnn_sdpa.cpp):
# builds bench/gpu/cudnn_sdpa_probe.cpp with g++ against the image's cuDNN (no LibTorch, seconds),
# checks forward and backward against float64 on packs of mixed documents (GQA and not, a graph
# with room to spare, dense graphs, short documents sharing biased windows), then times the 1b
# shape's attention at several densities.
# bench/gpu/call.sh's sdpa set; alone: bash bench/gpu/cudnn_sdpa.sh   (LOOM_SDPA_CASES: extra probe lines;
# LOOM_SDPA_SET=windows runs only the biased windows and the lines of one sequence per document
# beside them; LOOM_SDPA_SET=order only packs of a few documents in pack order against longest first)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/loom-out}
mkdir -p "$OUT"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; } | tee "$OUT/sdpa.txt"
CUDNN=$(python3 -c 'import nvidia.cudnn as m, os; print(list(m.__path__)[0])')
NVCC=$(command -v nvcc || find /usr/local -maxdepth 3 -path "/usr/local/cuda*/bin/nvcc" 2>/dev/null | head -1)
CUDA_HOME=$(dirname "$(dirname "$NVCC")")
CUDART_INC=$(python3 -c 'import nvidia.cuda_runtime as m; print(list(m.__path__)[0])' 2>/dev/null)/include
echo "cudnn $CUDNN; cuda $CUDA_HOME" | tee -a "$OUT/sdpa.txt"
export LD_LIBRARY_PATH="$CUDNN/lib:$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}"
timeout 120 g++ -std=c++17 -O2 bench/gpu/cudnn_sdpa_probe.cpp trainer/kernels/cuda/cudnn_sdpa.cpp \
  -I"$CUDNN/include" -I"$CUDA_HOME/include" -I"$CUDART_INC" -L"$CUDNN/lib" -l:libcudnn.so.9 \
  -L"$CUDA_HOME/lib64" -lcudart -o /tmp/cudnn_sdpa_probe 2>&1 | tail -20 | tee -a "$OUT/sdpa.txt"
P=/tmp/cudnn_sdpa_probe
run() { echo "== probe $*" | tee -a "$OUT/sdpa.txt"; timeout 120 "$P" "$@" 2>&1 | tail -12 | tee -a "$OUT/sdpa.txt"; }
if [ "${LOOM_SDPA_SET:-all}" = order ]; then
# The sequences' order in the layout: pack order against longest first, checked, then timed on the
# 1b's attention (four packs) and the 7b's (one pack: micro_bsz 1) at 2 and 3 documents a pack.
run 8 2 128 1,127,128,129,300,15,324,76 --iters 3 --longest-first
for spec in "16 16 128 4096,4096,4096,4096 --dense" "32 32 128 4096 --dense --packs 1"; do
  run $spec --no-check --iters 20
done
# (graph batches as the trainer rounds the documents up to a power of two)
for spec in "16 16 128 pack:4096:2 --batch 8" "16 16 128 pack:4096:3 --batch 16" \
            "32 32 128 pack:4096:2 --packs 1 --batch 2" "32 32 128 pack:4096:3 --packs 1 --batch 4"; do
  run $spec --no-check --iters 20
  run $spec --no-check --iters 20 --longest-first
done
cp "$OUT/sdpa.txt" "$OUT/summary.txt"
exit 0
fi
if [ "${LOOM_SDPA_SET:-all}" = all ]; then
# Correctness: a 1-token document, 127/128/129 around a tile, documents cut anywhere (GQA 8/2, D 128);
# MHA at D 64; the same documents in a graph with room to spare (unused sequences of length 0).
run 8 2 128 1,127,128,129,300,15,324,76 --iters 3
run 8 8 64 1,127,128,129,300,15,324,76 --iters 3
run 8 2 128 1,127,128,129,300,15,324,76 --batch 16 --max-seq 1024 --iters 3
run 16 16 128 pack:1024:30 --packs 2 --batch 64 --max-seq 1024 --iters 3
# Speed, the 1b shape (16 heads, D 128), four packs of 4096: one document a pack, ~2 and ~60.
run 16 16 128 4096,4096,4096,4096 --no-check --iters 20
fi
run 16 16 128 4096,4096,4096,4096 --no-check --iters 20 --dense
if [ "${LOOM_SDPA_SET:-all}" = all ]; then
run 8 2 128 512,512,512 --iters 3 --dense
fi
run 16 16 128 pack:4096:2 --no-check --iters 20 --batch 16 --max-seq 4096
run 16 16 128 pack:4096:60 --no-check --iters 20 --batch 256
run 16 16 128 pack:4096:250 --no-check --iters 20 --batch 1024
if [ "${LOOM_SDPA_SET:-all}" = all ]; then
# A graph longer than the documents: the cost of its empty tiles.
run 16 16 128 pack:4096:8 --no-check --iters 20 --batch 32
run 16 16 128 pack:4096:8 --no-check --iters 20 --batch 32 --max-seq 4096
fi
# Short documents sharing windows kept apart by a bias (SdpaShape::bias): checks, then the time of
# 250 and 60 documents a pack against the lines above.
run 8 2 128 1,127,30,40,50,8,100,76,3,128 --windows 128 --iters 3
run 8 8 64 1,127,30,40,50,8,100,76,3,128 --windows 256 --batch 8 --iters 3
run 16 16 128 pack:4096:250 --no-check --iters 20 --windows 256
run 16 16 128 pack:4096:250 --no-check --iters 20 --windows 512
run 16 16 128 pack:4096:60 --no-check --iters 20 --windows 512
# Windows of 256 beside a second call for the longer documents, as the trainer runs them: a check
# with documents longer than the window, then one sequence per document against windows at ~34,
# ~68 and ~136 tokens a document (where the trainer's threshold of 64 should sit).
run 8 2 128 1,127,30,300,50,8,700,76,3,128 --windows 128 --iters 3
run 16 16 128 pack:4096:120 --no-check --iters 20 --batch 512
run 16 16 128 pack:4096:120 --no-check --iters 20 --windows 256
run 16 16 128 pack:4096:60 --no-check --iters 20 --windows 256
run 16 16 128 pack:4096:30 --no-check --iters 20 --batch 128
run 16 16 128 pack:4096:30 --no-check --iters 20 --windows 256
# Windows of 128 against 256: fewer empty tiles where documents are short (a window of 128 is one
# tile), twice the windows.
run 16 16 128 pack:4096:250 --no-check --iters 20 --windows 128
run 16 16 128 pack:4096:120 --no-check --iters 20 --windows 128
while read -r line; do [ -n "$line" ] && run $line; done <<< "${LOOM_SDPA_CASES:-}"
cp "$OUT/sdpa.txt" "$OUT/summary.txt"
