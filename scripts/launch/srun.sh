#!/usr/bin/env bash
# Launch a loom program under Slurm, one task per GPU (or per CPU rank):
#   sbatch --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 scripts/launch/srun.sh build/trainer/loom-train --config configs/internlm_7b.ini
# or inside an allocation: bash scripts/launch/srun.sh build/trainer/loom-train ...
# loom reads SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID; the rendezvous host is MASTER_ADDR if set,
# else the first node of SLURM_JOB_NODELIST, and the port MASTER_PORT or 29500 + SLURM_JOB_ID % 1000
# (docs/DISTRIBUTED.md). Each task picks its GPU by SLURM_LOCALID.
#SBATCH --job-name=loom
#SBATCH --output=loom-%j.log
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 PROGRAM [ARGS...]" >&2
  exit 2
fi
# --kill-on-bad-exit: one failed rank ends the step at once (loom's own timeout is the fallback).
exec srun --kill-on-bad-exit=1 --cpu-bind=none "$@"
