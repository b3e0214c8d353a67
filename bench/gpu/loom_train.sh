#!/usr/bin/env bash
# loom-train on one GPU with a preset of bench/gpu/run.sh: random documents packed to 4096 (LOOM_BENCH_SEQ_LEN)
# tokens (bench/gpu/make_packed.py), bf16, flash attention, the CUDA path. Prints one JSON line
# (tokens/s, TFLOP/s, MFU, peak memory) over the steps after the warm-up, with the memory plan's
# total beside the measured peak and the seconds from launch to the first step.
# tokens_per_s is wall clock: the real tokens of steps WARMUP+1..STEPS (num_consumed_tokens of
# metrics.jsonl) over the time between the log lines of step WARMUP and step STEPS (each line's
# arrival, stamped by a reader of the log pipe; a metrics.jsonl "time"/"timestamp" field instead
# where loom-train writes one), so what no step_time holds (data waits, host gaps between steps)
# counts. mfu is that rate times loom's FLOPs per token (its own mfu figures, weighted by
# step_time, times sum(step_time) / wall); *_step_sum are the former figures from the sum of the
# step times; step_s_median and step_s_sem (the standard error of the mean step) from the intervals
# between the timed step lines.
# Env: LOOM_BENCH_STEPS (10), LOOM_BENCH_WARMUP (3), LOOM_BENCH_DOCS (make_packed.py --docs:
# random, one, paragraphs, sft16), LOOM_BENCH_DATA (a packed .bin to train on instead: its .meta
# beside it), LOOM_BENCH_TAG (log names loom_TAG.log, default the preset), LOOM_BENCH_MICRO_NUM
# (data.micro_num, default 1: micro-batches accumulated per step), LOOM_TRAIN_EXTRA,
# LOOM_BENCH_BIN (the loom-train to time, default build-gpu/trainer/loom-train: an older build's).
# Usage: bench/gpu/loom_train.sh PRESET MICRO_BSZ CHECKPOINT(fraction or auto) OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 2
PRESET=$1 BSZ=$2 CKPT=$3 OUT=$4
STEPS=${LOOM_BENCH_STEPS:-10} WARMUP=${LOOM_BENCH_WARMUP:-3} TAG=${LOOM_BENCH_TAG:-$PRESET}
MICRO_NUM=${LOOM_BENCH_MICRO_NUM:-1}
BIN=${LOOM_BENCH_BIN:-build-gpu/trainer/loom-train} SEQ=${LOOM_BENCH_SEQ_LEN:-4096}
case "$PRESET" in
  1b) SHAPE="--model.hidden_size=2048 --model.num_layers=24 --model.num_attention_heads=16" ;;
  7b) SHAPE="--model.hidden_size=4096 --model.num_layers=32 --model.num_attention_heads=32" ;;
  7b12) SHAPE="--model.hidden_size=4096 --model.num_layers=12 --model.num_attention_heads=32" ;;  # fits 80 GB
  *) echo "unknown preset $PRESET" >&2; exit 2 ;;
esac
WORK=$(mktemp -d /tmp/loom-bench-XXXX)
mkdir -p "$WORK/train/synthetic"
if [ -n "${LOOM_BENCH_DATA:-}" ]; then
  ln -s "$(realpath "$LOOM_BENCH_DATA")" "$WORK/train/synthetic/part0.bin"
  ln -s "$(realpath "$LOOM_BENCH_DATA.meta")" "$WORK/train/synthetic/part0.bin.meta"
else
  python3 bench/gpu/make_packed.py "$WORK/train/synthetic/part0.bin" --seq-len "$SEQ" --packs $((BSZ * MICRO_NUM * (STEPS + 2))) \
    --docs "${LOOM_BENCH_DOCS:-random}" >&2
fi
read -ra SHAPE_ARGS <<< "$SHAPE"
read -ra EXTRA_ARGS <<< "${LOOM_TRAIN_EXTRA:-}"
ARGS=(--job.run_dir="$WORK/run" --job.device=cuda --model.dtype=bfloat16
  --job.peak_tflops=989 --job.tensorboard=false --ckpt.enable_save_ckpt=false --job.log_every=1
  --data.train_folder="$WORK/train" --data.seq_len="$SEQ" --data.micro_bsz="$BSZ" --data.micro_num="$MICRO_NUM"
  --data.total_steps="$STEPS" --model.vocab_size=103168 --model.checkpoint="$CKPT" "${SHAPE_ARGS[@]}" "${EXTRA_ARGS[@]}")
# The memory plan of the same run, to set beside the allocator's measured peak.
"$BIN" plan --json "${ARGS[@]}" > "$WORK/plan.json" 2> "$OUT/plan_${TAG}.err" || true
# --profile-memory: the breakdown (parameters, gradients, optimizer state, activations) lands in the log.
# The log goes through a reader that stamps each step line with its arrival time (loom flushes
# stderr per line): the wall clock of the timed window.
"$BIN" --profile-memory "${ARGS[@]}" 2>&1 | tee "$OUT/loom_${TAG}.log" | python3 -u -c '
import re, sys, time
while True:
    line = sys.stdin.readline()
    if not line:
        break
    m = re.search(r"INFO step (\d+)/", line)
    if m:
        print(m.group(1), repr(time.time()), flush=True)
' > "$WORK/stamps.txt" || { tail -30 "$OUT/loom_${TAG}.log" >&2; exit 1; }
python3 - "$WORK/run/metrics.jsonl" "$PRESET" "$BSZ" "$CKPT" "$WARMUP" "$WORK/plan.json" "$OUT/loom_${TAG}.log" "$WORK/stamps.txt" "$SEQ" "$MICRO_NUM" <<'PY'
import json, re, statistics, sys
path, preset, bsz, ckpt, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
try:
    plan = json.load(open(sys.argv[6]))
except Exception:
    plan = None
log = open(sys.argv[7], errors="replace").read()
# Start-up: the first log line's clock to the first metrics line's (HH:MM:SS of the log prefix).
clock = re.findall(r"^\[loom (\d\d):(\d\d):(\d\d)", log, re.M)
first = re.search(r"^\[loom (\d\d):(\d\d):(\d\d).*INFO step 1/", log, re.M)
secs = lambda t: int(t[0]) * 3600 + int(t[1]) * 60 + int(t[2])
startup_s = secs(first.groups()) - secs(clock[0]) if clock and first else None
rows = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l]
timed = [r for r in rows if r["step"] > warmup]
n = sum(r["tokens_per_s"] * r["step_time"] for r in timed)
t = sum(r["step_time"] for r in timed)
# Wall clock of the timed window: a timestamp field of metrics.jsonl if there is one, else the
# arrival times of the log's step lines.
by_step = {r["step"]: r for r in rows}
clock_key = next((k for k in ("time", "timestamp", "wall_time", "unix_time") if all(k in r for r in rows)), None)
if clock_key:
    when, clock_src = {r["step"]: float(r[clock_key]) for r in rows}, "metrics.jsonl " + clock_key
else:
    when, clock_src = {}, "log line arrival"
    for l in open(sys.argv[8]):
        s, ts = l.split()
        when.setdefault(int(s), float(ts))
last = max(by_step)
if warmup in when and last in when and last > warmup:
    wall = when[last] - when[warmup]
    if "num_consumed_tokens" in by_step[last] and warmup in by_step and "num_consumed_tokens" in by_step[warmup]:
        real = by_step[last]["num_consumed_tokens"] - by_step[warmup]["num_consumed_tokens"]
    else:
        real = n
else:
    wall, real, clock_src = t, n, "sum of step_time (no clock of steps %d and %d)" % (warmup, last)
tok_s = real / wall
# The spread of the timed steps' wall times (the intervals between step lines), so a ratio of two
# runs can be read against its noise: the standard error of the mean step.
gaps = [when[s] - when[s - 1] for s in range(warmup + 1, last + 1) if s in when and s - 1 in when]
if len(gaps) < 2:
    gaps = [r["step_time"] for r in timed]
step_sem = statistics.stdev(gaps) / len(gaps) ** 0.5 if len(gaps) > 1 else None
mfu_wall = sum(r["mfu"] * r["step_time"] for r in timed) / wall
mean = lambda k: sum(r[k] for r in timed) / len(timed)
print(json.dumps(dict(system="loom", preset=preset, micro_bsz=bsz, micro_num=int(sys.argv[10]), seq_len=int(sys.argv[9]), checkpoint=ckpt,
                      steps_timed=len(timed), step_s=round(wall / len(timed), 4), tokens_per_s=round(tok_s, 1),
                      step_s_median=round(statistics.median_high(gaps), 4),
                      step_s_sem=round(step_sem, 5) if step_sem is not None else None,
                      tflops=round(mfu_wall * 989, 1),  # --job.peak_tflops=989
                      mfu=round(mfu_wall, 4), clock=clock_src, wall_s=round(wall, 3), real_tokens_timed=int(real),
                      step_s_step_sum=round(t / len(timed), 4), tokens_per_s_step_sum=round(n / t, 1),
                      tflops_step_sum=round(mean("tflops"), 1), mfu_step_sum=round(mean("mfu"), 4),
                      peak_allocated_gib=round(max(r["peak_memory_mb"] for r in rows) / 1024, 2),
                      peak_reserved_gib=round(max(r.get("peak_reserved_mb", 0) for r in rows) / 1024, 2),
                      final_loss=round(rows[-1]["loss"], 4), startup_to_step1_s=startup_s,
                      plan_total_gib=round(plan["per_rank_bytes"]["total"] / 2**30, 2) if plan else None,
                      plan_checkpoint=plan["checkpoint_fraction"] if plan else None,
                      plan_vs_peak=round(plan["per_rank_bytes"]["total"] / (max(r["peak_memory_mb"] for r in rows) * 2**20), 3) if plan else None)))
PY
# --profiling (in LOOM_TRAIN_EXTRA): the trace is too big to bring back whole; a summary is not.
if [ -f "$WORK/run/profile_trace.json" ]; then
  python3 bench/gpu/trace_summary.py "$WORK/run/profile_trace.json" > "$OUT/trace_${TAG}.txt" 2>&1 || true
  gzip -c "$WORK/run/profile_trace.json" > "$OUT/trace_${TAG}.json.gz" || true
  [ "$(stat -c %s "$OUT/trace_${TAG}.json.gz" 2>/dev/null || echo 0)" -lt 16000000 ] || rm -f "$OUT/trace_${TAG}.json.gz"
fi
[ -f "$WORK/run/memory_profile.json" ] && { echo "memory_profile.json:"; cat "$WORK/run/memory_profile.json"; } >> "$OUT/loom_${TAG}.log"
rm -rf "$WORK"
