#!/usr/bin/env bash
# FP8 against bf16 on real text: tests/data's two novels (English and Japanese, public domain), or
# with CORPUS=pystdlib the Python standard library's source on this machine (the .py files of
# python3's sysconfig stdlib path, sorted, one document per blank-line separated paragraph: tens of
# MB, so 1,000 steps see no text twice, where the novels repeat about 6 times), tokenized with
# InternLM's tokenizer and packed to SEQ_LEN, then STEPS steps of the 1b preset
# (micro_bsz 1, no recompute) from the same seed and data order in bf16 and in fp8. Writes both
# metrics.jsonl files as OUT/quality_{bf16,fp8}.jsonl and prints, over the logged steps after
# WARMUP, the largest relative difference between the two runs' recorded losses (every 10th step).
# A logged training loss is one micro-batch's (one pack): it swings with the pack's content (1.3
# to 7 on source code), so it is also reported as the mean over windows of 10 logged steps, and
# VALID_FRACTION of the documents (loom-pack split, before packing) is held out and evaluated
# every VALID_EVERY steps: the same held-out tokens at every point of both curves.
# Run on the GPU machine after scripts/device/build.sh.
# Prints one JSON line for fp8 against bf16 and one for a second bf16 run against the first (pairs
# are [bf16, other]). Usage: bench/gpu/fp8_quality.sh OUT_DIR [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bench/gpu/fp8_quality.sh OUT_DIR [STEPS]}
STEPS=${2:-1000}
SEQ_LEN=${SEQ_LEN:-2048} WARMUP=${WARMUP:-100} VALID_FRACTION=${VALID_FRACTION:-0.03} VALID_EVERY=${VALID_EVERY:-50}
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
$B/packer/loom-pack split --valid-fraction "$VALID_FRACTION" --seed 1 --output-dir "$W/split" "$W"/tokens/*.bin \
  > "$W/split.log" 2>&1
for part in train valid; do
  $B/packer/loom-pack pack --seq-len "$SEQ_LEN" --strategy bestfit --seed 1 --output-dir "$W/packed/$part/samples" \
    "$W"/split/$part/*.bin > "$W/pack_$part.log" 2>&1
done
# bf16_repeat: bf16 again, same seed and data. Flash attention's backward sums dq with atomics, so
# the two bf16 runs differ from their first steps on, and training amplifies that: how far they
# drift apart is the yardstick for how far fp8 drifts from bf16.
for run in bf16 fp8 bf16_repeat; do
  precision=${run%_repeat}
  timeout 280 $B/trainer/loom-train --job.run_dir="$W/run_$run" --job.device=cuda --model.dtype=bfloat16 \
    --model.precision=$precision --job.peak_tflops=989 --job.tensorboard=false --ckpt.enable_save_ckpt=false \
    --job.log_every=10 --job.seed=7 --data.train_folder="$W/packed/train" \
    --data.valid_folder="$W/packed/valid" --data.valid_every="$VALID_EVERY" --data.seq_len="$SEQ_LEN" --data.micro_bsz=1 \
    --data.micro_num=1 --data.total_steps="$STEPS" --model.vocab_size=103168 --model.checkpoint=0 \
    --model.hidden_size=2048 --model.num_layers=24 --model.num_attention_heads=16 \
    --adam.lr=3e-4 --lr_scheduler.warmup_ratio=0.05 > "$OUT/quality_$run.log" 2>&1
  cp "$W/run_$run/metrics.jsonl" "$OUT/quality_$run.jsonl"
done
for other in fp8 bf16_repeat; do
python3 - "$OUT/quality_bf16.jsonl" "$OUT/quality_$other.jsonl" "$WARMUP" "$other" <<'PY'
import json, sys
def load(path):
    train, valid = {}, {}
    for r in map(json.loads, open(path)):
        if "loss" in r:
            train[r["step"]] = r
        v = [k for k in r if k.startswith("val/") and k.endswith("_loss")]
        if v:
            valid[r["step"]] = r[v[0]]
    return train, valid
(t0, v0), (t1, v1) = load(sys.argv[1]), load(sys.argv[2])
warmup = int(sys.argv[3])
def compare(a, b, keys):
    diffs = [(abs(b[k] - a[k]) / a[k], k) for k in keys]
    return dict(compared=len(diffs), max_rel_diff=round(max(diffs)[0], 5), at_step=max(diffs)[1],
                mean_rel_diff=round(sum(d for d, _ in diffs) / len(diffs), 5),
                mean_signed_rel_diff=round(sum((b[k] - a[k]) / a[k] for k in keys) / len(keys), 5))
steps = sorted(s for s in t0 if s in t1 and s > warmup)
loss0 = {s: t0[s]["loss"] for s in steps}
loss1 = {s: t1[s]["loss"] for s in steps}
win = [steps[i:i + 10] for i in range(0, len(steps) - 9, 10)]
mean0 = {w[-1]: sum(loss0[s] for s in w) / len(w) for w in win}
mean1 = {w[-1]: sum(loss1[s] for s in w) / len(w) for w in win}
vsteps = sorted(s for s in v0 if s in v1 and s > warmup)
tok = [sum(r["tokens_per_s"] for r in d.values() if "tokens_per_s" in r) / len(d) for d in (t0, t1)]
print(json.dumps(dict(bf16_against=sys.argv[4], train_loss_per_logged_step=compare(loss0, loss1, steps),
                      train_loss_mean_of_10_logged=compare(mean0, mean1, sorted(mean0)),
                      valid_loss=compare(v0, v1, vsteps) if vsteps else None,
                      final_train_loss=[loss0[steps[-1]], loss1[steps[-1]]],
                      final_valid_loss=[v0.get(vsteps[-1]), v1.get(vsteps[-1])] if vsteps else None,
                      mean_tokens_per_s=[round(tok[0]), round(tok[1])])))
PY
done
rm -rf "$W"
