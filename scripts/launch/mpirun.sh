#!/usr/bin/env bash
# Launch a loom program with Open MPI's mpirun (MPI only starts the processes; loom's rendezvous is
# c10d's TCPStore, so loom does not link MPI):
#   One node, 4 ranks:   bash scripts/launch/mpirun.sh 4 build/trainer/loom-train --config configs/demo.ini
#   Several nodes:       MASTER_ADDR=node0 HOSTFILE=hosts bash scripts/launch/mpirun.sh 16 build/trainer/loom-train ...
# loom reads OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE. On one node the rendezvous is
# 127.0.0.1; across nodes MASTER_ADDR (rank 0's host) must be exported to every rank, as below.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 NPROCS PROGRAM [ARGS...]" >&2
  exit 2
fi
np=$1
shift
args=(-np "$np" --bind-to none -x MASTER_PORT="${MASTER_PORT:-29500}")
if [ -n "${MASTER_ADDR:-}" ]; then args+=(-x MASTER_ADDR="$MASTER_ADDR"); fi
if [ -n "${HOSTFILE:-}" ]; then args+=(--hostfile "$HOSTFILE"); fi
# NCCL and Gloo settings travel too when set.
for v in NCCL_DEBUG NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME; do
  if [ -n "${!v:-}" ]; then args+=(-x "$v"); fi
done
exec mpirun "${args[@]}" "$@"
