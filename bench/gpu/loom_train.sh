#!/usr/bin/env bash
# loom-train on one GPU with a preset of bench/gpu/run.sh: random documents packed to 4096
# tokens (bench/gpu/make_packed.py), bf16, flash attention, the CUDA path. Prints one JSON line
# (tokens/s, TFLOP/s, MFU, peak memory) averaged over the steps after the warm-up, with the memory
# plan's total beside the measured peak and the seconds from launch to the first step.
# Usage: bench/gpu/loom_train.sh PRESET MICRO_BSZ CHECKPOINT(fraction or auto) OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
PRESET=$1 BSZ=$2 CKPT=$3 OUT=$4
STEPS=${LOOM_BENCH_STEPS:-10} WARMUP=3
case "$PRESET" in
  1b) SHAPE="--model.hidden_size=2048 --model.num_layers=24 --model.num_attention_heads=16" ;;
  7b) SHAPE="--model.hidden_size=4096 --model.num_layers=32 --model.num_attention_heads=32" ;;
  *) echo "unknown preset $PRESET" >&2; exit 2 ;;
esac
WORK=$(mktemp -d /tmp/loom-bench-XXXX)
mkdir -p "$WORK/train/synthetic"
python3 bench/gpu/make_packed.py "$WORK/train/synthetic/part0.bin" --seq-len 4096 --packs $((BSZ * (STEPS + 2))) >&2
ARGS=(--job.run_dir="$WORK/run" --job.device=cuda --model.dtype=bfloat16
  --job.peak_tflops=989 --job.tensorboard=false --ckpt.enable_save_ckpt=false --job.log_every=1
  --data.train_folder="$WORK/train" --data.seq_len=4096 --data.micro_bsz="$BSZ" --data.micro_num=1
  --data.total_steps="$STEPS" --model.vocab_size=103168 --model.checkpoint="$CKPT" $SHAPE ${LOOM_TRAIN_EXTRA:-})
# The memory plan of the same run, to set beside the allocator's measured peak.
build-gpu/trainer/loom-train plan --json "${ARGS[@]}" > "$WORK/plan.json" 2> "$OUT/plan_${PRESET}.err" || true
# --profile-memory: the breakdown (parameters, gradients, optimizer state, activations) lands in the log.
build-gpu/trainer/loom-train --profile-memory "${ARGS[@]}" > "$OUT/loom_${PRESET}.log" 2>&1 || { tail -30 "$OUT/loom_${PRESET}.log" >&2; exit 1; }
python3 - "$WORK/run/metrics.jsonl" "$PRESET" "$BSZ" "$CKPT" "$WARMUP" "$WORK/plan.json" "$OUT/loom_${PRESET}.log" <<'PY'
import json, re, sys
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
tok_s = n / t
mean = lambda k: sum(r[k] for r in timed) / len(timed)
print(json.dumps(dict(system="loom", preset=preset, micro_bsz=bsz, seq_len=4096, checkpoint=ckpt,
                      steps_timed=len(timed), step_s=round(t / len(timed), 4), tokens_per_s=round(tok_s, 1),
                      tflops=round(mean("tflops"), 1), mfu=round(mean("mfu"), 4),
                      peak_allocated_gib=round(max(r["peak_memory_mb"] for r in rows) / 1024, 2),
                      peak_reserved_gib=round(max(r.get("peak_reserved_mb", 0) for r in rows) / 1024, 2),
                      final_loss=round(rows[-1]["loss"], 4), startup_to_step1_s=startup_s,
                      plan_total_gib=round(plan["per_rank_bytes"]["total"] / 2**30, 2) if plan else None,
                      plan_checkpoint=plan["checkpoint_fraction"] if plan else None,
                      plan_vs_peak=round(plan["per_rank_bytes"]["total"] / (max(r["peak_memory_mb"] for r in rows) * 2**20), 3) if plan else None)))
PY
# --profiling (in LOOM_TRAIN_EXTRA): the trace is too big to bring back whole; a summary is not.
if [ -f "$WORK/run/profile_trace.json" ]; then
  python3 bench/gpu/trace_summary.py "$WORK/run/profile_trace.json" > "$OUT/trace_${PRESET}.txt" 2>&1 || true
  gzip -c "$WORK/run/profile_trace.json" > "$OUT/trace_${PRESET}.json.gz" || true
  [ "$(stat -c %s "$OUT/trace_${PRESET}.json.gz" 2>/dev/null || echo 0)" -lt 16000000 ] || rm -f "$OUT/trace_${PRESET}.json.gz"
fi
[ -f "$WORK/run/memory_profile.json" ] && { echo "memory_profile.json:"; cat "$WORK/run/memory_profile.json"; } >> "$OUT/loom_${PRESET}.log"
rm -rf "$WORK"
