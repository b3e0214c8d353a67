#!/usr/bin/env bash
# The GPU speed targets in one call, each set beside its peer. LOOM_TARGET_SETS picks the sets
# (default "precision density"; one set fits a ~10-minute device call, both may not; also recipe
# and budget, below):
#
# precision: loom's 1b (micro_bsz 4, no recompute) and 7b (micro_bsz 1, model.checkpoint=auto)
# presets in bf16 and fp8 (bench/gpu/fp8_vs_bf16.sh) on packs of one document each (full causal
# attention, the work the peer does; LOOM_PRECISION_DOCS), then HF transformers compiled on the 1b
# shape and micro-batch (bench/gpu/hf_llama.py, full causal), and beside them loom's 1b bf16 on
# document-masked packs (make_packed.py's random documents, ~2 a pack: less attention work). Prints
# one line per target (1b bf16 >= 64% MFU, 7b bf16 >= 60%, fp8/bf16 >= 1.45x on 7b and >= 1.35x on
# 1b) with the figures, and loom's 1b bf16 tokens/s over the peer's. LOOM_BENCH_STEPS (default 20).
#
# density: "real short documents train at full speed". The 1b preset (bf16, micro_bsz 4, no
# recompute; with LOOM_DENSITY_7B=1 also the 7b preset, micro_bsz 1, model.checkpoint=auto) on
# packs of five densities made by bench/gpu/make_packed.py, the same packs for loom and the peer:
#   one         tests/data/botchan.txt as one long document: one document a pack, full causal
#   cuts        one's tokens cut into random's documents: ~2 a pack, the same text as one
#   random      make_packed.py's default: random ids in the same documents as cuts; no target (not
#               the same text as one: it shows what the ids alone change)
#   paragraphs  botchan's paragraphs, one a document, bestfit: ~56 a pack
#   sft16       botchan's lines, ~17 tokens a document, bestfit: ~230 a pack
# (tokenized with tests/data/internlm_v7.model by loom-tokenize and packed by loom-pack, built
# here first if build-gpu lacks them). For each density: loom's tokens/s (wall clock over the
# timed steps, bench/gpu/loom_train.sh), MFU by two conventions, met / not met (tokens/s on the
# density >= tokens/s on one-document packs), and the peer: HF transformers' Llama with
# torchtitan-style document masking (flex_attention, a BlockMask that is causal AND same document,
# torch.compile; bench/gpu/hf_llama.py --mode flex), its tokens/s and loom/peer against 1.1x, and a
# last line per preset: the lowest loom/peer over the densities against the same 1.1x. On
# one-document packs also HF compiled with SDPA (full causal, exact there). The peers recompute
# layers (HF's gradient checkpointing: all of them) only where loom's plan recomputed some: the same
# work where loom recomputes none, more than loom's where it recomputes some but not all; the
# summary says which did.
# MFU conventions (peak 989 TFLOP/s, real tokens; N = matmul parameters, docs/GPU.md):
#   model:    6 N + 12 L C T per token: the full T x T square of every pack, whatever its documents
#             (PaLM; what loom-train logs).
#   executed: 6 N + 12 L C P / R per token, P = sum over the timed packs' segments of
#             len (len + 1) / 2 (the query-key pairs causal attention within documents computes),
#             R = their real tokens: 2 matmuls x 2 FLOPs x C per pair and layer, x 3 for the backward.
#             One document a pack gives P/R = (T + 1) / 2: half the model convention's attention.
# Each ratio to one-document packs carries one standard error (+-) from both runs' step spreads
# (bench/gpu/loom_train.sh's step_s_sem); the verdict is the ratio itself against 1.0.
# LOOM_DENSITY_STEPS (30) steps, the first LOOM_DENSITY_WARMUP (4) untimed; LOOM_DENSITIES
# (default "one cuts random paragraphs sft16"); LOOM_DENSITY_SDPA_PEER=0 skips HF compiled on one;
# LOOM_FLEX_DEADLINE (epoch seconds) bounds the flex peer instead of LOOM_FLEX_TIMEOUT;
# LOOM_DENSITY_PRESETS ("1b", "7b" or "1b 7b"; "7b12": the 7b's layers, 12 of them, for an 80 GB
# card) overrides LOOM_DENSITY_7B; LOOM_DENSITY_FLEX=0 skips the peer.
# Every step runs under timeout; the summary lands in OUT_DIR/density_targets.txt, the logs, the
# packs' statistics and the JSON lines in OUT_DIR/density_logs.tgz (LOOM_DENSITY_TAR=0: loose).
# Run on the GPU machine after scripts/device/build.sh. Usage: bash bench/gpu/targets.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: bench/gpu/targets.sh OUT_DIR}
mkdir -p "$OUT"
SETS=${LOOM_TARGET_SETS:-"precision density"}
export LD_LIBRARY_PATH="/tmp/loom-prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"

precision() {
LOOM_BENCH_DOCS=${LOOM_PRECISION_DOCS:-one} LOOM_BENCH_STEPS=${LOOM_BENCH_STEPS:-20} bash bench/gpu/fp8_vs_bf16.sh "$OUT" "1b 7b"
LOOM_BENCH_DOCS=random LOOM_BENCH_TAG=1b_masked LOOM_BENCH_STEPS=${LOOM_BENCH_STEPS:-20} timeout 200 \
  bash bench/gpu/loom_train.sh 1b 4 0 "$OUT" > "$OUT/1b_bf16_masked.json" || echo '{"failed": "1b masked"}' > "$OUT/1b_bf16_masked.json"
timeout 300 python3 bench/gpu/hf_llama.py --preset 1b --mode compile --micro-bsz 4 --steps 12 --warmup 3 \
  > "$OUT/hf_1b.json" 2> "$OUT/hf_1b.err" || echo "{\"failed\": \"hf 1b\"}" > "$OUT/hf_1b.json"
python3 - "$OUT" <<'PY'
import json, os, sys

def last(name):
    try:
        return json.loads(open(os.path.join(sys.argv[1], name)).read().strip().splitlines()[-1])
    except Exception:
        return {}

r = {k: last(f"{k}.json") for k in ("1b_bf16", "1b_fp8", "7b_bf16", "7b_fp8", "hf_1b", "1b_bf16_masked")}
tok = lambda k: r[k].get("tokens_per_s")
mfu = lambda k: r[k].get("mfu")

def line(name, value, goal, shown):
    verdict = "missing" if value is None else ("met" if value >= goal else "not met")
    print(f"target {name}: {shown} (goal >= {goal}): {verdict}")

line("1b bf16 MFU", mfu("1b_bf16"), 0.64, f"{mfu('1b_bf16')} ({tok('1b_bf16')} tokens/s; document-masked packs: "
     f"{mfu('1b_bf16_masked')}, {tok('1b_bf16_masked')} tokens/s)")
line("7b bf16 MFU", mfu("7b_bf16"), 0.60, f"{mfu('7b_bf16')} ({tok('7b_bf16')} tokens/s)")
for p, goal in (("7b", 1.45), ("1b", 1.35)):
    b, f = tok(f"{p}_bf16"), tok(f"{p}_fp8")
    ratio = round(f / b, 3) if b and f else None
    line(f"{p} fp8/bf16", ratio, goal, f"{ratio} ({f} / {b} tokens/s)")
if tok("1b_bf16") and tok("hf_1b"):
    print(f"peer: loom 1b bf16 {tok('1b_bf16')} / HF compiled {tok('hf_1b')} tokens/s = "
          f"{tok('1b_bf16') / tok('hf_1b'):.3f}x (HF MFU {mfu('hf_1b')})")
else:
    print("peer: missing (see hf_1b.err)")
PY
}

# The flex peer on density()'s packs of $preset (its locals), one process compiled once, under
# LOOM_FLEX_DEADLINE (epoch seconds: what is left before it) or LOOM_FLEX_TIMEOUT. Args: hf_llama.py flags.
flex_peer() {
  local s=${LOOM_FLEX_TIMEOUT:-360}
  [ -n "${LOOM_FLEX_DEADLINE:-}" ] && s=$(( LOOM_FLEX_DEADLINE - $(date +%s) ))
  [ "$s" -lt 1 ] && s=1
  timeout "$s" python3 bench/gpu/hf_llama.py --preset "$preset" --mode flex --micro-bsz "$bsz" --data "$data" \
    --tags "$tags" --steps $((STEPS - WARMUP)) --warmup "$WARMUP" "$@" \
    > "$OUT/flex_$preset.jsonl" 2> "$OUT/flex_$preset.err" || echo "flex peer $preset: exit $? (see flex_$preset.err)"
}

density() {
  local STEPS=${LOOM_DENSITY_STEPS:-30} WARMUP=${LOOM_DENSITY_WARMUP:-4}
  local DENS=${LOOM_DENSITIES:-"one cuts random paragraphs sft16"}
  local PRESETS="1b" W t0
  [ "${LOOM_DENSITY_7B:-0}" = 1 ] && PRESETS="1b 7b"
  PRESETS=${LOOM_DENSITY_PRESETS:-$PRESETS}
  W=$(mktemp -d /tmp/loom-density-XXXX)
  t0=$(date +%s)
  if [ ! -x build-gpu/tokenize/loom-tokenize ] || [ ! -x build-gpu/packer/loom-pack ]; then
    LOOM_TARGETS="loom-tokenize loom-pack" timeout 300 bash scripts/device/build.sh > "$OUT/density_build.log" 2>&1
    echo "density: built loom-tokenize loom-pack rc=$? in $(( $(date +%s) - t0 )) s (make_packed.py falls back to Python without them)"
  fi
  for preset in $PRESETS; do
    local bsz=4 ckpt=0 hfck=""
    [[ "$preset" == 7b* ]] && { bsz=1; ckpt=auto; }
    local data="" tags=""
    for d in $DENS; do
      mkdir -p "$W/$preset/$d"
      timeout 120 python3 bench/gpu/make_packed.py "$W/$preset/$d/part0.bin" --seq-len 4096 \
        --packs $((bsz * (STEPS + 2))) --docs "$d" --stats-json "$OUT/packs_${preset}_$d.json" > /dev/null \
        2> "$OUT/packs_${preset}_$d.err" || { echo "density $preset $d: make_packed failed"; cat "$OUT/packs_${preset}_$d.err"; continue; }
      data="$data${data:+,}$W/$preset/$d/part0.bin" tags="$tags${tags:+,}$d"
      LOOM_BENCH_DATA="$W/$preset/$d/part0.bin" LOOM_BENCH_TAG="${preset}_$d" LOOM_BENCH_STEPS=$STEPS \
        LOOM_BENCH_WARMUP=$WARMUP timeout 300 bash bench/gpu/loom_train.sh "$preset" "$bsz" "$ckpt" "$OUT" \
        > "$OUT/density_${preset}_$d.json" 2> "$OUT/density_${preset}_$d.err" \
        || echo "{\"failed\": \"loom $preset $d\"}" >> "$OUT/density_${preset}_$d.json"
      echo "density $preset $d: $(tail -1 "$OUT/density_${preset}_$d.json") ($(( $(date +%s) - t0 )) s)"
    done
    # The peer does the work loom did: HF's gradient checkpointing recomputes every layer or none,
    # so it is on only where loom's plan recomputed layers of this preset (the 7b on an H200: none).
    grep -qE "model.checkpoint=auto: [1-9][0-9]* of" "$OUT"/loom_"${preset}"_*.log 2>/dev/null && hfck=--checkpoint
    if [ -n "$data" ] && [ "${LOOM_DENSITY_FLEX:-1}" = 1 ]; then
      flex_peer $hfck
      if [ -z "$hfck" ] && grep -qiE "OutOfMemoryError|out of memory" "$OUT/flex_$preset.err"; then
        echo "flex peer $preset: out of memory without checkpointing; again with it (the peer then recomputes every layer)"
        flex_peer --checkpoint
      fi
    fi
    [ "${LOOM_DENSITY_FLEX:-1}" = 1 ] && echo "density $preset flex peer done ($(( $(date +%s) - t0 )) s)"
    if [ "${LOOM_DENSITY_SDPA_PEER:-1}" = 1 ] && [[ " $DENS " == *" one "* ]]; then
      timeout 240 python3 bench/gpu/hf_llama.py --preset "$preset" --mode compile --micro-bsz "$bsz" \
        --data "$W/$preset/one/part0.bin" --tags one --steps $((STEPS - WARMUP)) --warmup "$WARMUP" $hfck \
        > "$OUT/hf_compile_${preset}_one.jsonl" 2> "$OUT/hf_compile_${preset}_one.err" || echo "sdpa peer $preset: exit $?"
      echo "density $preset sdpa peer done ($(( $(date +%s) - t0 )) s)"
    fi
  done
  python3 - "$OUT" "$W" "$WARMUP" "$STEPS" "$PRESETS" "$DENS" <<'PY' | tee "$OUT/density_targets.txt"
import json, os, re, sys
FLEX_GOAL = 1.1  # loom/flex at every density
sys.path.insert(0, "bench/gpu")
from hf_llama import PRESETS, PEAK_BF16_TFLOPS, flops_per_token, read_packed_shard

out, work, warmup, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
presets, dens = sys.argv[5].split(), sys.argv[6].split()

def lines(name):
    try:
        return [json.loads(l) for l in open(os.path.join(out, name)) if l.strip().startswith("{")]
    except Exception:
        return []

def timed_pairs(path, bsz):
    """Causal pairs and real tokens of the packs the timed steps train on (warmup*bsz .. steps*bsz)."""
    _, segs = read_packed_shard(path)
    pairs = real = 0
    for s in segs[warmup * bsz: steps * bsz]:
        n = s["length"].astype("int64")
        pairs += int((n * (n + 1) // 2).sum())
        real += int(n.sum())
    return pairs, real

def ratio_text(a, b, what):
    """a's tokens/s over b's, with one standard error from both runs' step spreads where they have one."""
    r = a["tokens_per_s"] / b["tokens_per_s"]
    if a.get("step_s_sem") is None or b.get("step_s_sem") is None:
        return f"{r:.3f}x {what}"
    rel = ((a["step_s_sem"] / a["step_s"]) ** 2 + (b["step_s_sem"] / b["step_s"]) ** 2) ** 0.5
    return f"{r:.3f}x +- {r * rel:.3f} {what}"

for preset in presets:
    p = PRESETS[preset]
    bsz = 1 if preset.startswith("7b") else 4
    fpt, n = flops_per_token(p, 4096)
    flex = {r.get("data"): r for r in lines(f"flex_{preset}.jsonl")}
    sdpa = {r.get("data"): r for r in lines(f"hf_compile_{preset}_one.jsonl")}
    loom = {d: (lines(f"density_{preset}_{d}.json") or [{}])[-1] for d in dens}
    ref = loom.get("one", {}).get("tokens_per_s")
    recomputed = set()
    for d in dens:
        try:
            log = open(os.path.join(out, f"loom_{preset}_{d}.log"), errors="replace").read()
        except OSError:
            continue
        m = re.search(r"model\.checkpoint=auto: (\d+) of (\d+) layers recomputed", log)
        recomputed.add(f"{m.group(1)} of {m.group(2)}" if m else f"0 of {p['layers']}")
    peer_ck = {bool(r.get("checkpoint")) for r in flex.values()}
    print(f"== density targets, {preset} (micro_bsz {bsz}, seq_len 4096, {steps - warmup} timed steps after {warmup}; "
          f"MFU model = 6N+12LCT, executed = 6N+12LC*pairs/token; peak {PEAK_BF16_TFLOPS:g}; layers recomputed: "
          f"loom {' / '.join(sorted(recomputed)) or '?'}, peer {' / '.join('all' if c else 'none' for c in sorted(peer_ck)) or '?'})")
    flex_ratios = []
    for d in dens:
        st = (lines(f"packs_{preset}_{d}.json") or [{}])[-1]
        r, f = loom[d], flex.get(d, {})
        tok = r.get("tokens_per_s")
        path = os.path.join(work, preset, d, "part0.bin")
        try:
            pairs, real = timed_pairs(path, bsz)
            exec_fpt = 6 * n + 12 * p["layers"] * p["hidden"] * pairs / real
        except Exception:
            exec_fpt = None
        mfu_m = round(tok * fpt / 1e12 / PEAK_BF16_TFLOPS, 4) if tok else None
        mfu_e = round(tok * exec_fpt / 1e12 / PEAK_BF16_TFLOPS, 4) if tok and exec_fpt else None
        if d == "one":
            verdict = "reference" if tok else "missing"
        elif d == "random":  # the target compares the same text; random ids are not
            cut = loom.get("cuts", {}).get("tokens_per_s")
            ratios = [ratio_text(r, loom["one"], "one-document")] if tok and ref else []
            if tok and cut:
                ratios.append(ratio_text(r, loom["cuts"], "cuts: the same documents over the text"))
            verdict = "no target, random ids" + (f" ({', '.join(ratios)})" if ratios else "")
        else:
            verdict = "missing" if not (tok and ref) else (
                f"{'met' if tok >= ref else 'not met'} ({ratio_text(r, loom['one'], 'one-document')})")
        ft = f.get("tokens_per_s")
        ratio = round(tok / ft, 3) if tok and ft else None
        peer = (f"flex peer {ft} tokens/s (MFU {f.get('mfu')} / {f.get('mfu_executed_attention')}), "
                f"loom/peer {ratio}x (goal >= {FLEX_GOAL}x): {'met' if ratio >= FLEX_GOAL else 'not met'}" if ratio
                else f"flex peer missing ({f.get('error', 'see flex_' + preset + '.err')})")
        print(f"target {preset} {d} ({st.get('docs_per_pack_mean')} docs/pack mean, median {st.get('docs_per_pack_median')}, "
              f"attention fraction {st.get('attn_flops_fraction')}): loom {tok} tokens/s, MFU {mfu_m} model / {mfu_e} executed; "
              f"vs one-document: {verdict}; {peer}")
        if ratio:
            flex_ratios.append((ratio, d))
        if d == "one" and sdpa.get("one", {}).get("tokens_per_s"):
            s = sdpa["one"]
            print(f"  peer HF compiled SDPA (full causal) on one-document packs: {s['tokens_per_s']} tokens/s "
                  f"(MFU {s.get('mfu')}), loom/peer {tok / s['tokens_per_s']:.3f}x" if tok else "")
    # Every density against the same peer: the lowest ratio decides.
    if flex_ratios and len(flex_ratios) == len(dens):
        low, at = min(flex_ratios)
        print(f"target {preset} loom/flex at every density (goal >= {FLEX_GOAL}x): lowest {low}x ({at}): "
              f"{'met' if low >= FLEX_GOAL else 'not met'}")
    else:
        print(f"target {preset} loom/flex at every density (goal >= {FLEX_GOAL}x): missing "
              f"({len(flex_ratios)} of {len(dens)} densities have both figures)")
PY
  echo "density: $(( $(date +%s) - t0 )) s in all"
  rm -rf "$W"
  # The device tool brings few files back: everything but the summary goes into one archive.
  if [ "${LOOM_DENSITY_TAR:-1}" = 1 ]; then
    # shellcheck disable=SC2046,SC2086  # the names ls finds are the archive's list
    (cd "$OUT" && tar -czf density_logs.tgz --remove-files $(ls density_*.json density_*.err packs_*.json packs_*.err \
      flex_*.jsonl flex_*.err hf_compile_*_one.* density_build.log 2>/dev/null; for preset in $PRESETS; do
      for d in $DENS; do ls loom_${preset}_$d.log plan_${preset}_$d.err trace_${preset}_$d.* 2>/dev/null; done; done))
  fi
}

# recipe: NVIDIA NeMo 24.09's published Llama2-7B recipe (Megatron-core + Transformer Engine, 8 H100,
# seq 4096, micro-batch 1, global batch 128: 16 micro-batches a GPU a step; 780 model TFLOP/s/GPU in
# FP8) on one GPU: each of LOOM_RECIPE_PRESET's presets (default 7b12, the 7b's layers, 12 of them,
# for an 80 GB card; "7b 7b12" on an H200) at micro_bsz 1, data.micro_num LOOM_RECIPE_MICRO_NUM (16),
# seq 4096, model.checkpoint=auto, in bf16 and fp8, on one-document packs of real text (full causal
# attention, the work NeMo's figure counts); then, while LOOM_RECIPE_DEADLINE (epoch s) leaves 150 s,
# on the same packs the HF peers in bf16 with the same 16 micro-batches accumulated, for the presets of
# LOOM_RECIPE_PEER_PRESETS (default: all): compiled with SDPA (exact on one-document packs) and the
# flex_attention peer. Model TFLOP/s by the one convention, 6N + 12LCT per token (PaLM's; NeMo's own
# counts the same square attention). Targets (7b on an H200): fp8 >= 800 and bf16 >= 600 model TFLOP/s;
# on the 7b12 the same lines are printed as figures for the card, with NeMo's 780 beside them. First,
# the card's device-to-device copy bandwidth (what a bandwidth-bound kernel can reach on it).
# LOOM_RECIPE_STEPS (10) steps, the first LOOM_RECIPE_WARMUP (2) untimed; LOOM_RECIPE_PEERS
# ("compile flex"; "" for none).
recipe_loom() {  # PRESET: loom in bf16 and fp8
  local preset=$1 precision
  for precision in bf16 fp8; do
    LOOM_BENCH_DATA="$W/one/part0.bin" LOOM_BENCH_TAG="recipe_${preset}_$precision" LOOM_BENCH_STEPS=$STEPS \
      LOOM_BENCH_WARMUP=$WARMUP LOOM_BENCH_MICRO_NUM=$M LOOM_TRAIN_EXTRA="--model.precision=$precision ${LOOM_TRAIN_EXTRA:-}" \
      timeout 240 bash bench/gpu/loom_train.sh "$preset" 1 auto "$OUT" > "$OUT/recipe_${preset}_$precision.json" \
      2> "$OUT/recipe_${preset}_$precision.err" || echo "{\"failed\": \"loom $preset $precision\"}" >> "$OUT/recipe_${preset}_$precision.json"
    echo "recipe $preset $precision: $(tail -1 "$OUT/recipe_${preset}_$precision.json") ($(( $(date +%s) - t0 )) s)"
  done
}

recipe_peers() {  # PRESET: the HF peers, each while the deadline leaves 150 s
  local preset=$1 hfck="" mode
  # The peers recompute layers only where loom's plan did (HF recomputes all or none).
  grep -qE "model.checkpoint=auto: [1-9][0-9]* of" "$OUT"/loom_recipe_"${preset}"_*.log 2>/dev/null && hfck=--checkpoint
  for mode in ${LOOM_RECIPE_PEERS-compile flex}; do
    if [ "$(( ${LOOM_RECIPE_DEADLINE:-99999999999} - $(date +%s) ))" -lt 150 ]; then
      echo "recipe $preset peer $mode: skipped, under 150 s left"
      continue
    fi
    timeout 240 python3 bench/gpu/hf_llama.py --preset "$preset" --mode "$mode" --micro-bsz 1 --micro-num "$M" \
      --data "$W/one/part0.bin" --tags one --steps $((STEPS - WARMUP)) --warmup "$WARMUP" $hfck \
      > "$OUT/recipe_hf_${mode}_$preset.jsonl" 2> "$OUT/recipe_hf_${mode}_$preset.err" || echo "recipe peer $mode: exit $?"
    echo "recipe $preset peer $mode: $(tail -1 "$OUT/recipe_hf_${mode}_$preset.jsonl" 2>/dev/null) ($(( $(date +%s) - t0 )) s)"
  done
}

recipe_report() {  # PRESET
  local preset=$1
  python3 - "$OUT" "$preset" "$M" <<'PY' | tee -a "$OUT/recipe_targets.txt"
import json, os, sys
sys.path.insert(0, "bench/gpu")
from hf_llama import PRESETS, flops_per_token

out, preset, M = sys.argv[1], sys.argv[2], int(sys.argv[3])
NEMO = {"fp8": 780, "bf16": None}  # NeMo 24.09 Llama2-7B, 8 H100, FP8: 780 model TFLOP/s/GPU
GOAL = {"fp8": 800, "bf16": 600}

def last(name):
    try:
        return [json.loads(l) for l in open(os.path.join(out, name)) if l.strip().startswith("{")][-1]
    except Exception:
        return {}

fpt, n = flops_per_token(PRESETS[preset], 4096)
print(f"== recipe {preset}: seq 4096, micro_bsz 1, micro_num {M} ({M * 4096} tokens a step), one-document packs; "
      f"model TFLOP/s = tokens/s x (6N + 12LCT) = tokens/s x {fpt / 1e9:.2f} GFLOP (N = {n / 1e9:.3f}B matmul parameters)")
peers = {m: last(f"recipe_hf_{m}_{preset}.jsonl") for m in ("compile", "flex")}
for precision in ("bf16", "fp8"):
    r = last(f"recipe_{preset}_{precision}.json")
    tok = r.get("tokens_per_s")
    tf = round(tok * fpt / 1e12, 1) if tok else None
    goal = GOAL[precision]
    where = "goal on one H200 (7b)" if preset == "7b" else "figure on this card (the goal is the 7b's, on an H200)"
    verdict = "missing" if tf is None else (("met" if tf >= goal else "not met") if preset == "7b" else "no target here")
    peer_txt = "; ".join(
        f"loom/{m} {tok / p['tokens_per_s']:.3f}x ({p['tokens_per_s']} tokens/s, {p.get('tflops')} TFLOP/s bf16)"
        for m, p in peers.items() if tok and p.get("tokens_per_s"))
    print(f"target recipe {preset} {precision}: {tok} tokens/s, {tf} model TFLOP/s (MFU {r.get('mfu')}, step "
          f"{r.get('step_s')} s +- {r.get('step_s_sem')}, peak {r.get('peak_allocated_gib')} GiB, layers recomputed "
          f"{r.get('plan_checkpoint')}); {where} >= {goal}: {verdict}"
          + (f"; NeMo 24.09 FP8 on H100: {NEMO[precision]}, loom/NeMo {tf / NEMO[precision]:.3f}x" if NEMO[precision] and tf else "")
          + (f"; peers (bf16): {peer_txt}" if peer_txt else "; peers missing"))
PY
}

recipe() {
  local M=${LOOM_RECIPE_MICRO_NUM:-16} STEPS=${LOOM_RECIPE_STEPS:-10} WARMUP=${LOOM_RECIPE_WARMUP:-2} W t0 preset
  W=$(mktemp -d /tmp/loom-recipe-XXXX)
  t0=$(date +%s)
  mkdir -p "$W/one"
  timeout 60 python3 -c "
import torch, time
x = torch.empty(2 << 30, dtype=torch.uint8, device='cuda'); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20): y.copy_(x)
torch.cuda.synchronize(); s = (time.perf_counter() - t) / 20
print(f'recipe card: {torch.cuda.get_device_name()}, device-to-device copy of 2 GiB: {2 * x.numel() / s / 1e12:.3f} TB/s (read + write)')
" 2>&1 | tee "$OUT/recipe_targets.txt"
  timeout 180 python3 bench/gpu/make_packed.py "$W/one/part0.bin" --seq-len 4096 --packs $((M * (STEPS + 2))) \
    --docs one --stats-json "$OUT/recipe_packs.json" > /dev/null 2> "$OUT/recipe_packs.err" \
    || { echo "recipe: make_packed failed"; cat "$OUT/recipe_packs.err"; return; }
  echo "recipe: packs made ($(( $(date +%s) - t0 )) s)"
  for preset in ${LOOM_RECIPE_PRESET:-7b12}; do recipe_loom "$preset"; done
  for preset in ${LOOM_RECIPE_PEER_PRESETS:-${LOOM_RECIPE_PRESET:-7b12}}; do recipe_peers "$preset"; done
  for preset in ${LOOM_RECIPE_PRESET:-7b12}; do recipe_report "$preset"; done
  echo "recipe: $(( $(date +%s) - t0 )) s in all"
  rm -rf "$W"
}

# budget: everything but GEMM and attention in a 1b step (one-document packs, micro_bsz 4, bf16)
# against its goal, from an unprofiled and a profiled run (bench/gpu/ceilings.sh, which also times
# the GEMM and attention ceilings and prints the bound table); its "target" line.
budget() {
  LOOM_CEIL_PRESETS=1b LOOM_CEIL_PIPELINE=0 timeout 400 bash bench/gpu/ceilings.sh "$OUT" > "$OUT/budget_ceilings.md" 2>&1
  grep -E '^target ' "$OUT/budget_ceilings.md" || echo "target 1b everything but GEMM and attention: missing (see budget_ceilings.md)"
}

for set in $SETS; do
  case "$set" in
    precision) precision ;;
    density) density ;;
    recipe) recipe ;;
    budget) budget ;;
    *) echo "unknown target set $set (precision, density, recipe, budget)" ;;
  esac
done
