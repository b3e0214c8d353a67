#!/usr/bin/env bash
# FP8 against bf16 on real text: tests/data's two novels (English and Japanese, public domain), or
# with CORPUS=pystdlib the Python standard library's source on this machine (the .py files of
# python3's sysconfig stdlib path, sorted, one document per blank-line separated paragraph: tens of
# MB, so 1,000 steps see no text twice, where the novels repeat about 6 times), tokenized with
# InternLM's tokenizer and packed to SEQ_LEN, then STEPS steps of the 1b preset
# (micro_bsz 1, no recompute) from the same seed and data order in bf16 and in fp8. Writes both
# metrics.jsonl files as OUT/quality_{bf16,fp8}.jsonl and prints, over the logged steps after
# WARMUP, the largest relative difference between the two runs' recorded losses (every 10th step).
# Run on the GPU machine after scripts/device/build.sh.
# Usage: bench/gpu/fp8_quality.sh OUT_DIR [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bench/gpu/fp8_quality.sh OUT_DIR [STEPS]}
STEPS=${2:-1000}
SEQ_LEN=${SEQ_LEN:-2048} WARMUP=${WARMUP:-100}
B=build-gpu
W=$(mktemp -d /tmp/loom-fp8q-XXXX)
mkdir -p "$OUT"
case "${CORPUS:-novels}" in
  novels) INPUTS=(tests/data/botchan.txt tests/data/wagahaiwa_nekodearu.txt) TXT_DOC=line ;;
  pystdlib) find "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" -name '*.py' \
      -not -path '*/test/*' -not -path '*/tests/*' -not -path '*/site-packages/*' -print0 | sort -z \
      | xargs -0 cat > "$W/pystdlib.txt"
    INPUTS=("$W/pystdlib.txt") TXT_DOC=paragraph ;;
  *) echo "CORPUS is novels or pystdlib" >&2; exit 2 ;;
esac
$B/tokenize/loom-tokenize --model tests/data/internlm_v7.model --output-dir "$W/tokens" --txt-doc "$TXT_DOC" \
  "${INPUTS[@]}" > "$W/tokenize.log" 2>&1
grep -h "tokens" "$W/tokenize.log" | tail -2
$B/packer/loom-pack pack --seq-len "$SEQ_LEN" --strategy bestfit --seed 1 --output-dir "$W/packed/samples" \
  "$W"/tokens/*.bin > "$W/pack.log" 2>&1
for precision in bf16 fp8; do
  timeout 280 $B/trainer/loom-train --job.run_dir="$W/run_$precision" --job.device=cuda --model.dtype=bfloat16 \
    --model.precision=$precision --job.peak_tflops=989 --job.tensorboard=false --ckpt.enable_save_ckpt=false \
    --job.log_every=10 --job.seed=7 --data.train_folder="$W/packed" --data.seq_len="$SEQ_LEN" --data.micro_bsz=1 \
    --data.micro_num=1 --data.total_steps="$STEPS" --model.vocab_size=103168 --model.checkpoint=0 \
    --model.hidden_size=2048 --model.num_layers=24 --model.num_attention_heads=16 \
    --adam.lr=3e-4 --lr_scheduler.warmup_ratio=0.05 > "$OUT/quality_$precision.log" 2>&1
  cp "$W/run_$precision/metrics.jsonl" "$OUT/quality_$precision.jsonl"
done
python3 - "$OUT/quality_bf16.jsonl" "$OUT/quality_fp8.jsonl" "$WARMUP" <<'PY'
import json, sys
rows = [{r["step"]: r for r in map(json.loads, open(p)) if "loss" in r} for p in sys.argv[1:3]]
warmup = int(sys.argv[3])
steps = sorted(s for s in rows[0] if s in rows[1] and s > warmup)
diffs = [(abs(rows[1][s]["loss"] - rows[0][s]["loss"]) / rows[0][s]["loss"], s) for s in steps]
worst = max(diffs)
tok = [sum(r["tokens_per_s"] for r in d.values() if "tokens_per_s" in r) / len(d) for d in rows]
print(json.dumps(dict(steps_compared=len(steps), max_rel_loss_diff=round(worst[0], 5), at_step=worst[1],
                      mean_rel_loss_diff=round(sum(d for d, _ in diffs) / len(diffs), 5),
                      final_loss_bf16=rows[0][steps[-1]]["loss"], final_loss_fp8=rows[1][steps[-1]]["loss"],
                      mean_tokens_per_s_bf16=round(tok[0]), mean_tokens_per_s_fp8=round(tok[1]))))
PY
rm -rf "$W"
