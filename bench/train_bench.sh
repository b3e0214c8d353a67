#!/usr/bin/env bash
# Tokens/s of loom-train (C++/LibTorch) against the same model, data and batch in Python with
# Debian's python3-torch (bench/train_bench.py), run one after the other on this machine with the
# same intra-op threads; appends a section to bench/history/log.md (LOOM_BENCH_LOG). Both sides use the same
# libtorch_cpu and BLAS here, so the ratio measures what loom does around them: its fused CPU
# kernels (trainer/kernels/cpu_kernels.h) and, with job.attention=auto, segment attention
# (trainer/kernels/cpu_attention.h), which skips the masked-out work that the Python side computes.
#   bash bench/train_bench.sh [BUILD_DIR]     (default build/; needs loom-tokenize, loom-pack, loom-train)
# Environment (sizes; the defaults give the published figures): STEPS (20, the first 2 untimed),
# HIDDEN (256), LAYERS (4), SEQ_LEN (256), LOOM_BENCH_LOG (bench/history/log.md).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
W=$(mktemp -d /tmp/loom_train_bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
STEPS=${STEPS:-20} MB=4 MN=2 C=${HIDDEN:-256} L=${LAYERS:-4} H=8 V=2000 T=${SEQ_LEN:-256} THREADS=$(nproc)
LOG=${LOOM_BENCH_LOG:-bench/history/log.md}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

"$B/tokenize/loom-tokenize" --model data_samples/spm_2k.model --output-dir "$W/tok" data_samples/neko_head.jsonl.gz 2>/dev/null
"$B/packer/loom-pack" pack --seq-len "$T" --strategy bestfit --seed 1 --output-dir "$W/data/train/neko" "$W/tok/neko_head.bin" 2>/dev/null

# loom-train twice: job.attention=auto (segment attention on CPU fp32) and =masked (the dense
# block-diagonal mask, the Python side's algorithm), so the report separates the two effects.
loom_tokens_per_s() {  # ATTENTION -> tokens/s over steps 3.. (the first two warm up, as on the Python side)
  rm -rf "$W/run"
  "$B/trainer/loom-train" --config configs/demo.ini --job.run_dir="$W/run" --data.train_folder="$W/data/train" \
    --data.valid_folder "" --data.seq_len="$T" --data.total_steps="$STEPS" --data.micro_bsz=$MB --data.micro_num=$MN --model.hidden_size="$C" \
    --model.num_layers="$L" --model.num_attention_heads=$H --model.vocab_size=$V --job.threads="$THREADS" \
    --job.log_every=1 --ckpt.enable_save_ckpt=false --job.tensorboard=false --job.attention="$1" >"$W/loom.log" 2>&1 || { tail -5 "$W/loom.log" >&2; exit 1; }
  # Total real tokens / total step time, as the Python side measures.
  /usr/bin/python3 -c "
import json,sys
r=[json.loads(l) for l in open('$W/run/metrics.jsonl') if '\"loss\"' in l][2:]
print('%.1f' % (sum(x['tokens_per_s']*x['step_time'] for x in r)/sum(x['step_time'] for x in r)))"
}
CPP_MASKED=$(loom_tokens_per_s masked)
# The count is logged with thousands separators ("model: 4,438,272 parameters").
CPP_PARAMS=$(sed -n 's/.*model: \([0-9,]*\) parameters.*/\1/p' "$W/loom.log" | tr -d ,)
[ -n "$CPP_PARAMS" ] || { echo "no 'model: N parameters' line in loom-train's log:" >&2; tail -5 "$W/loom.log" >&2; exit 1; }
CPP=$(loom_tokens_per_s auto)
KERNEL=$(sed -n 's/.*INFO attention: \([a-z ]*[a-z]\).*/\1/p' "$W/loom.log" | head -1)
read -r _ PY _ PY_PARAMS < <(/usr/bin/python3 bench/train_bench.py "$W/data/train/neko/packed.bin" "$STEPS" $MB $MN "$C" "$L" $H $V "$THREADS")
# The same model: the same parameter count (the architecture is compared in train_bench.py's header).
if [ "$CPP_PARAMS" != "$PY_PARAMS" ]; then
  echo "parameter counts differ: loom-train $CPP_PARAMS, python $PY_PARAMS" >&2
  exit 1
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
RATIO=$(/usr/bin/python3 -c "print('%.2f' % ($CPP / $PY))")
RATIO_MASKED=$(/usr/bin/python3 -c "print('%.2f' % ($CPP_MASKED / $PY))")
echo "loom-train $CPP tokens/s ($KERNEL), masked attention $CPP_MASKED tokens/s, python3-torch $PY tokens/s, ratio ${RATIO}x (masked ${RATIO_MASKED}x; $CPP_PARAMS parameters each)"
{
  echo
  echo "## loom-train vs python3-torch on CPU (bench/train_bench.sh), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load avg before $LOAD_BEFORE, after $LOAD_AFTER"
  echo "- LibTorch: Debian's 1.13 (libtorch_cpu) with $(dpkg-query -W -f '${Package} ${Version}' libopenblas0-openmp 2>/dev/null || echo 'unknown BLAS'), used by both sides"
  echo "- git commit: $(git rev-parse --short HEAD)"
  echo "- command: STEPS=$STEPS HIDDEN=$C LAYERS=$L SEQ_LEN=$T bash bench/train_bench.sh $B"
  echo "- preset: C=$C layers=$L heads=$H V=$V T=$T micro_bsz=$MB micro_num=$MN, fp32, $CPP_PARAMS parameters, $THREADS threads, $STEPS steps (first 2 excluded)"
  echo "- loom-train: $CPP tokens/s ($KERNEL); with job.attention=masked: $CPP_MASKED tokens/s; python3-torch 1.13 (eager, same model/data/batch/optimizer, masked attention): $PY tokens/s
- ratio loom-train / python3-torch: ${RATIO}x (masked attention on both sides: ${RATIO_MASKED}x)"
} >> "$LOG"
