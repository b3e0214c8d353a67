#!/usr/bin/env bash
# Launch a loom program with torchrun (no Python in the ranks: --no_python runs the binary itself).
#   One node, 4 ranks:   bash scripts/launch/torchrun.sh 4 build/trainer/loom-train --config configs/demo.ini
#   Several nodes:       NNODES=2 RDZV_ENDPOINT=node0:29400 bash scripts/launch/torchrun.sh 8 build/trainer/loom-train ...
#                        (the same command on every node)
# torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; loom reads
# them first (docs/DISTRIBUTED.md). The c10d rendezvous (--standalone on one node) hands each job a free
# MASTER_PORT, so two jobs on one machine do not collide. TORCHRUN may name another torchrun.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 NPROC_PER_NODE PROGRAM [ARGS...]" >&2
  exit 2
fi
nproc=$1
shift
# Debian's python3-torch 1.13 spells the flags with underscores; torch 2.x accepts both.
read -r -a torchrun <<< "${TORCHRUN:-/usr/bin/python3 -m torch.distributed.run}"
# torch 1.13 on Python 3.11 parses its default "--redirects 0"/"--tee 0" to None and crashes
# (Std.from_str("0") and ("3") are None there). "1" works: stdout is teed to the console (and kept
# in torchrun's log folder), stderr is untouched.
torchrun+=(--redirects 1 --tee 1)
if [ "${NNODES:-1}" = 1 ]; then
  exec "${torchrun[@]}" --standalone --nnodes=1 --nproc_per_node="$nproc" --no_python "$@"
fi
exec "${torchrun[@]}" --nnodes="$NNODES" --nproc_per_node="$nproc" --rdzv_backend=c10d \
  --rdzv_endpoint="${RDZV_ENDPOINT:?set RDZV_ENDPOINT=host:port of the first node}" \
  --rdzv_id="${RDZV_ID:-loom}" --no_python "$@"
