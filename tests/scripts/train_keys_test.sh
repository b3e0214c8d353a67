#!/usr/bin/env bash
# loom-train's keys in either spelling ('-' or '_', INI and command line), and an unknown key named
# with its INI file and line and the nearest valid key (the same OptionParser as loom-tokenize and
# loom-pack, tested in tests/common/options_test.cpp; here through the real binary).
# usage: train_keys_test.sh LOOM_TRAIN_BIN SCRATCH_DIR
set -euo pipefail
TRAIN=$1
mkdir -p "$2"
T=$(mktemp -d "$2/train_keys.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
plan() { "$TRAIN" plan --device-memory-gib 1000 --json "$@" 2>&1 | tail -n 1; }

cat > "$T/dash.ini" <<'INI'
[data]
seq-len = 128
micro-bsz = 3
[model]
hidden-size = 64
num_layers = 2
num-attention-heads = 4
vocab-size = 1000
INI
sed 's/-/_/g' "$T/dash.ini" > "$T/under.ini"
for ini in dash under; do
  out=$(plan --config "$T/$ini.ini")
  grep -q '"seq_len": 128' <<< "$out" || fail "$ini.ini: seq_len not 128: $out"
  grep -q '"micro_bsz": 3' <<< "$out" || fail "$ini.ini: micro_bsz not 3: $out"
done
# The two files describe one model: the same parameter count.
[ "$(plan --config "$T/dash.ini" | grep -o '"num_parameters": [0-9]*')" = \
  "$(plan --config "$T/under.ini" | grep -o '"num_parameters": [0-9]*')" ] || fail "dash.ini and under.ini differ"
# The command line, in either spelling, wins over the file.
out=$(plan --config "$T/under.ini" --data.seq-len=64)
grep -q '"seq_len": 64' <<< "$out" || fail "--data.seq-len=64 did not apply"
out=$(plan --config "$T/dash.ini" --data.micro_bsz 5)
grep -q '"micro_bsz": 5' <<< "$out" || fail "--data.micro_bsz 5 did not apply"

# Unknown keys: FILE:LINE and the nearest key; usage error (exit 2).
printf '[data]\nseq_len = 128\n\n[model]\nhiden_size = 64\n' > "$T/typo.ini"
set +e
out=$("$TRAIN" plan --config "$T/typo.ini" 2>&1); rc=$?
set -e
[ $rc = 2 ] || fail "typo.ini: exit $rc, expected 2"
grep -qF "$T/typo.ini:5: unknown key 'model.hiden_size' (did you mean 'model.hidden_size'?)" <<< "$out" ||
  fail "typo.ini: $out"
set +e
out=$("$TRAIN" plan --config "$T/under.ini" --data.seqlen=3 2>&1); rc=$?
set -e
[ $rc = 2 ] || fail "--data.seqlen: exit $rc, expected 2"
grep -qF "unrecognised option '--data.seqlen=3' (did you mean '--data.seq_len'?)" <<< "$out" || fail "--data.seqlen: $out"
echo OK
