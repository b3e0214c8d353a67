#!/usr/bin/env bash
# loom-dedup as four Slurm job arrays on a shared filesystem, each stage after the one before it
# (afterok), every task a separate process over its part of the work (docs/DEDUP.md, "Stages"):
#
#   signatures  one task per SIG_TASKS share of the sources (inputs and reference sets, round-robin)
#   buckets     BUCKET_TASKS tasks over the bands (14 MinHash bands + the exact band by default)
#   clusters    one task
#   apply       APPLY_TASKS tasks over the inputs (round-robin)
#
#   WORK=/shared/dedup/work OUT=/shared/dedup/out bash scripts/launch/dedup_slurm.sh \
#       [--reference /shared/old-corpus --eval mmlu.jsonl --model tok.model ...] -- /shared/tokens/
#
# Flags before `--` go to every stage; they and the inputs after it must be the same in every
# stage. A task that fails can simply be resubmitted (or the whole script rerun): finished outputs
# are checked and kept, so only the missing work is redone. Variables: LOOM_DEDUP (the binary,
# default build/dedup/loom-dedup), WORK, OUT, SIG_TASKS (default 8), BUCKET_TASKS (default 15),
# APPLY_TASKS (default 8), THREADS (CPUs per task, default 8), MEM_MB (the external sorts' memory per
# task, default 4096), SBATCH_ARGS (more sbatch flags: partition, account, time).
set -euo pipefail
: "${WORK:?set WORK to the work folder on the shared filesystem}"
: "${OUT:?set OUT to the output folder on the shared filesystem}"
LOOM_DEDUP=${LOOM_DEDUP:-build/dedup/loom-dedup}
SIG_TASKS=${SIG_TASKS:-8}
BUCKET_TASKS=${BUCKET_TASKS:-15}
APPLY_TASKS=${APPLY_TASKS:-8}
THREADS=${THREADS:-8}
MEM_MB=${MEM_MB:-4096}
read -r -a sbatch_args <<<"${SBATCH_ARGS:-}"

flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  flags+=("$1")
  shift
done
if [ $# -eq 0 ]; then
  echo "usage: WORK=DIR OUT=DIR $0 [LOOM-DEDUP FLAGS] -- INPUT..." >&2
  exit 2
fi
shift
if [ $# -eq 0 ]; then
  echo "$0: no input after --" >&2
  exit 2
fi
mkdir -p "$WORK/slurm"

# The command of one stage, quoted for --wrap; the task index is Slurm's, read when the task runs.
stage_command() {
  local stage=$1 tasks=$2 cmd
  shift 2
  printf -v cmd '%q ' "$LOOM_DEDUP" --stage "$stage" --tasks "$tasks" --threads "$THREADS" --memory-mb "$MEM_MB" \
    --work-dir "$WORK" --output-dir "$OUT" "${flags[@]}" "$@"
  echo "$cmd --task \$SLURM_ARRAY_TASK_ID"
}

# submit STAGE TASKS DEPENDENCY INPUT...: prints the job id.
submit() {
  local stage=$1 tasks=$2 dep=$3
  shift 3
  local dep_args=()
  if [ -n "$dep" ]; then dep_args=(--dependency="afterok:$dep"); fi
  sbatch --parsable --job-name="loom-dedup-$stage" --array="0-$((tasks - 1))" --cpus-per-task="$THREADS" \
    --output="$WORK/slurm/$stage-%a.log" "${dep_args[@]}" "${sbatch_args[@]}" \
    --wrap="$(stage_command "$stage" "$tasks" "$@")"
}

sig=$(submit signatures "$SIG_TASKS" "" "$@")
buckets=$(submit buckets "$BUCKET_TASKS" "$sig" "$@")
clusters=$(submit clusters 1 "$buckets" "$@")
apply=$(submit apply "$APPLY_TASKS" "$clusters" "$@")
echo "submitted: signatures $sig, buckets $buckets, clusters $clusters, apply $apply"
echo "report: $WORK/report.jsonl, summary: $WORK/summary.json, logs: $WORK/slurm/"
