#!/usr/bin/env bash
# One device call (<= 600 s): tokens/s of the 1b and 7b presets before and after a change, on the same
# one-document packs (full causal attention) in the same call, then plan == run on both presets.
# The older tree arrives as build-base/src.tar; it is built beside this one (both at once) and timed
# through this tree's bench/gpu/loom_train.sh (LOOM_BENCH_BIN), so both read the same data the same way.
# Here: mkdir -p build-base && git archive BASE > build-base/src.tar; device tool: carry
# [".debs", "build-base"]; bash bench/gpu/loop_ab_call.sh   (LOOM_CALL_S, default 570; LOOM_AB_ROUNDS, 2)
# LOOM_AB_SPECS (default "1b:4:0 7b:1:auto", PRESET:MICRO_BSZ:CHECKPOINT), LOOM_AB_DOCS (make_packed.py
# --docs of the packs, default "one"), LOOM_AB_TESTS (a test_gpu filter run on this tree first, e.g.
# "*attention*"), LOOM_AB_PLAN=0 skips plan == run.
# Logs in $OUT/logs.tgz, one JSON line per run in $OUT/ab.jsonl, the summary on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/call_env.sh
build_with_base "loom-train loom-tokenize loom-pack${LOOM_AB_TESTS:+ test_gpu}" "loom-train"
[ -n "${LOOM_AB_TESTS:-}" ] && run_gpu_tests "$LOOM_AB_TESTS"
SPECS=${LOOM_AB_SPECS:-"1b:4:0 7b:1:auto"} DOCS=${LOOM_AB_DOCS:-one}
D=$(mktemp -d /tmp/loom-ab-XXXX)
for spec in $SPECS; do
  IFS=: read -r preset bsz ckpt <<< "$spec"
  for docs in $DOCS; do
    python3 bench/gpu/make_packed.py "$D/${preset}_$docs.bin" --seq-len 4096 --packs $(( bsz * 14 )) --docs "$docs" \
      --tools build-gpu --stats-json "$L/packs_${preset}_$docs.json" >> "$L/packs.log" 2>&1
  done
done
for round in $(seq "${LOOM_AB_ROUNDS:-2}"); do
  for spec in $SPECS; do
    IFS=: read -r preset bsz ckpt <<< "$spec"
    for docs in $DOCS; do
      for tree in base current; do
        bin=$ROOT/build-gpu/trainer/loom-train; [ "$tree" = base ] && bin=$BASE_TREE/build-gpu/trainer/loom-train
        [ "$(left)" -gt 75 ] || { echo "no time left for $tree $spec $docs round $round" | tee -a "$L/device.txt"; continue; }
        line=$(LOOM_BENCH_BIN=$bin LOOM_BENCH_DATA=$D/${preset}_$docs.bin LOOM_BENCH_STEPS=12 \
               LOOM_BENCH_TAG="${preset}_${docs}_${tree}_$round" \
               timeout 150 bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$L" 2>>"$L/ab_err.txt")
        [ -n "$line" ] || line="{\"preset\": \"$preset\", \"error\": \"failed\"}"
        echo "${line%\}}, \"docs\": \"$docs\", \"tree\": \"$tree\", \"round\": $round}" | tee -a "$OUT/ab.jsonl"
      done
    done
  done
done
[ "${LOOM_AB_PLAN:-1}" = 1 ] && [ "$(left)" -gt 60 ] && timeout "$(left)" bash bench/gpu/plan_vs_run.sh "$L" 1b 7b | tee -a "$L/device.txt"
echo "done at $(( $(date +%s) - T0 )) s" | tee -a "$L/device.txt"
tar czf "$OUT/logs.tgz" -C "$OUT" logs
