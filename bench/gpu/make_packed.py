#!/usr/bin/env python3
"""Writes a loom packed shard (docs/FORMAT.md, format version 1) for the GPU benchmark, with one of
five document densities (--docs):

  random      (default, as before) random documents: uniform random ids in [3, vocab) with lengths
              drawn log-uniformly in [64, 4 * seq_len]; packs filled in order (strategy concat), a
              document cut at a pack end continues in the next pack (~2 documents a pack at 4096).
  cuts        random's documents over real text: the one mode's tokens (the same text, in the same
              order), cut where random cuts (the same seed draws the same document lengths). Against
              one, only the documents differ; against random, only the ids.
  one         real text as ONE long document cut into packs (strategy concat): the text (--text,
              default tests/data/botchan.txt) repeated as often as the packs need, tokenized as a
              single document (loom-tokenize --txt-doc file), so every pack is one segment: full
              causal attention.
  paragraphs  real text, one paragraph a document, packed bestfit. botchan.txt (sentencepiece's copy)
              has no blank lines: its paragraphs are hard-wrapped at 66-74 characters, so a line
              of fewer than PARAGRAPH_END_CHARS (65) characters ends a paragraph (4288 lines -> 950
              paragraphs, median 40 tokens). The paragraphs are written blank-line separated and
              tokenized with --txt-doc paragraph.
  sft16       real text, one line a document (loom-tokenize --txt-doc line: 4288 lines of botchan,
              17 tokens each on average with bos and eos), packed bestfit: ~240 documents a pack.

Text modes tokenize with --model (default tests/data/internlm_v7.model, vocab 103168, the 1b/7b
presets' vocab) and pack with loom's own tools when --tools (default: build-gpu/, else build/) has
tokenize/loom-tokenize and packer/loom-pack; without them, Python sentencepiece and a Python
concat / best-fit-decreasing packer (the same rules as docs/PACK.md, not the same bytes). The text
is repeated until the packer makes at least --packs packs; the first --packs are written, with the
header's counts and checksums recomputed (the rest of the header is loom-pack's).

Prints one JSON line of statistics (and writes it to --stats-json): packs, documents (segments: a
document cut at a pack end counts in each pack it is in) per pack, mean and median, segment
lengths, padding, and the attention FLOPs fraction sum(len^2 over segments) / (packs * seq_len^2),
with causal_pairs = sum(len * (len + 1) / 2), what causal attention over the segments executes.

Usage: make_packed.py OUT.bin --seq-len 4096 --packs 64 [--vocab 103168] [--seed 0]
                      [--docs random|cuts|one|paragraphs|sft16] [--text F] [--model M] [--tools DIR]
                      [--stats-json F]
"""
import argparse
import glob
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import xxhash

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PARAGRAPH_END_CHARS = 65
SEG_DTYPE = np.dtype([("doc", "<u8"), ("start", "<u4"), ("length", "<u4"), ("doc_pos", "<u4"),
                      ("seg_flags", "<u4")])


def write_packed(out, tokens, offsets, segs, vocab, bos, eos, flags, seq_len, pad_id, strategy, num_docs,
                 fingerprint, seed):
    """tokens: array [packs * seq_len] (uint16/uint32); offsets: [packs + 1]; segs: SEG_DTYPE array."""
    packs = len(offsets) - 1
    index = np.asarray(offsets, dtype="<u8").tobytes() + np.asarray(segs, dtype=SEG_DTYPE).tobytes()
    body = tokens.tobytes()
    num_tokens = int(np.asarray(segs, dtype=SEG_DTYPE)["length"].sum())
    header = struct.pack("<8sIIIIiiIIII", b"LOOMPACK", 1, 128, tokens.dtype.itemsize, vocab, bos, eos, flags,
                         seq_len, pad_id, strategy)
    header += struct.pack("<QQQQQQQQ", packs, len(segs), num_tokens, num_docs,
                          xxhash.xxh64_intdigest(body), xxhash.xxh64_intdigest(index), fingerprint, seed)
    header += bytes(16)
    assert len(header) == 128
    with open(out, "wb") as f:
        f.write(body)
    with open(out + ".meta", "wb") as f:
        f.write(header + index)


def read_packed(path):
    """docs/FORMAT.md's reader, plus the header fields write_packed needs."""
    h = np.fromfile(path + ".meta", dtype=np.uint8, count=128)
    assert bytes(h[:8]) == b"LOOMPACK", "not a loom packed shard"
    u32 = h[8:48].view("<u4")
    i32 = h[8:48].view("<i4")
    hdr = dict(version=int(u32[0]), header_size=int(u32[1]), dtype_bytes=int(u32[2]), vocab=int(u32[3]),
               bos=int(i32[4]), eos=int(i32[5]), flags=int(u32[6]), seq_len=int(u32[7]), pad_id=int(u32[8]),
               strategy=int(u32[9]))
    assert hdr["version"] <= 1, "format version %d is newer than this reader" % hdr["version"]
    u64 = h[48:112].view("<u8")
    hdr.update(num_packs=int(u64[0]), num_segments=int(u64[1]), num_docs=int(u64[3]), fingerprint=int(u64[6]),
               seed=int(u64[7]))
    meta = np.fromfile(path + ".meta", dtype=np.uint8, offset=hdr["header_size"])
    n = hdr["num_packs"]
    seg_offsets = meta[: 8 * (n + 1)].view("<u8")
    segments = meta[8 * (n + 1):].view(SEG_DTYPE)
    tokens = np.fromfile(path, dtype={2: "<u2", 4: "<u4"}[hdr["dtype_bytes"]])
    return hdr, tokens, seg_offsets, segments


def stats(seg_offsets, segments, seq_len, mode):
    counts = np.diff(np.asarray(seg_offsets, dtype=np.int64))
    lens = np.asarray(segments["length"], dtype=np.float64)
    packs = len(counts)
    real = float(lens.sum())
    return dict(docs=mode, packs=packs, seq_len=seq_len, segments=int(len(lens)),
                docs_per_pack_mean=round(float(counts.mean()), 2), docs_per_pack_median=float(np.median(counts)),
                docs_per_pack_min=int(counts.min()), docs_per_pack_max=int(counts.max()),
                doc_len_mean=round(float(lens.mean()), 1), doc_len_median=float(np.median(lens)),
                real_tokens=int(real), padding_fraction=round(1 - real / (packs * seq_len), 5),
                attn_flops_fraction=round(float((lens ** 2).sum()) / (packs * seq_len ** 2), 6),
                causal_pairs=int((lens * (lens + 1) / 2).sum()))


def random_docs(a):
    """random's packs: (tokens, seg_offsets, segments, documents)."""
    rng = np.random.default_rng(a.seed)
    L = a.seq_len
    tokens = np.empty(a.packs * L, dtype="<u4")
    offsets, segs = [0], []
    doc, doc_len, doc_pos = 0, 0, 0
    for p in range(a.packs):
        start = 0
        while start < L:
            if doc_pos == doc_len:  # next document
                if p or start or segs:
                    doc += 1
                doc_len = int(np.exp(rng.uniform(np.log(64), np.log(4 * L))))
                doc_pos = 0
            n = min(L - start, doc_len - doc_pos)
            tokens[p * L + start: p * L + start + n] = rng.integers(3, a.vocab, n)
            ends = doc_pos + n == doc_len
            segs.append((doc, start, n, doc_pos, 1 if ends else 0))
            start += n
            doc_pos += n
        offsets.append(len(segs))
    return tokens, offsets, np.array(segs, dtype=SEG_DTYPE), doc + 1


def cut_text(a):
    """random's documents (lengths and cuts) over the one mode's tokens. random's ids are drawn and
    dropped: drawing them keeps the generator's sequence, so the cuts are random's to the token."""
    _, offsets, segs, num_docs = random_docs(a)
    one = argparse.Namespace(**vars(a))
    one.docs, one.out = "one", a.out + ".one.bin"
    extra = text_mode(one)
    try:
        hdr, tokens, _, _ = read_packed(one.out)
    finally:
        for f in (one.out, one.out + ".meta"):
            if os.path.exists(f):
                os.remove(f)
    assert len(tokens) >= a.packs * a.seq_len, "the one mode wrote %d tokens" % len(tokens)
    # flags 0: the cut documents do not begin with bos or end with eos.
    write_packed(a.out, np.ascontiguousarray(tokens[: a.packs * a.seq_len]), offsets, segs, hdr["vocab"], hdr["bos"],
                 hdr["eos"], 0, a.seq_len, hdr["pad_id"], 0, num_docs, hdr["fingerprint"], a.seed)
    return extra


def read_text(path):
    with open(path, encoding="utf-8-sig") as f:  # botchan.txt begins with a BOM and has CRLF lines
        return f.read().replace("\r\n", "\n").replace("\r", "\n")


def text_documents(text, mode):
    """The mode's documents (strings) of one copy of the text, and loom-tokenize's --txt-doc for them."""
    lines = [l.strip() for l in text.split("\n") if l.strip()]
    if mode == "one":
        return ["\n".join(lines)], "file"
    if mode == "sft16":
        return lines, "line"
    paras, cur = [], []
    for l in lines:
        cur.append(l)
        if len(l) < PARAGRAPH_END_CHARS:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return paras, "paragraph"


def find_tools(arg):
    dirs = [arg] if arg else [os.path.join(ROOT, "build-gpu"), os.path.join(ROOT, "build")]
    for d in dirs:
        tok, pack = os.path.join(d, "tokenize", "loom-tokenize"), os.path.join(d, "packer", "loom-pack")
        if os.access(tok, os.X_OK) and os.access(pack, os.X_OK):
            return tok, pack
    return None


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        sys.exit("%s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))


def pack_with_tools(tools, docs, txt_doc, copies, a, work):
    tok, pack = tools
    sep = "\n" if txt_doc == "line" else "\n\n"
    txt = os.path.join(work, "docs.txt")
    with open(txt, "w", encoding="utf-8") as f:
        if txt_doc == "file":  # one document: the copies joined
            f.write("\n".join([docs[0]] * copies) + "\n")
        else:
            for _ in range(copies):
                f.write(sep.join(docs) + sep)
    for d in ("tokens", "packed"):
        shutil.rmtree(os.path.join(work, d), ignore_errors=True)
    # --max-doc-bytes: the one-document mode's text (copies of a 270 KB text) stays one piece.
    run([tok, "--model", a.model, "--output-dir", os.path.join(work, "tokens"), "--txt-doc", txt_doc,
         "--max-doc-bytes", str(max(1 << 20, os.path.getsize(txt) + 1)), txt])
    strategy = "concat" if txt_doc == "file" else "bestfit"
    run([pack, "pack", "--seq-len", str(a.seq_len), "--strategy", strategy, "--seed", str(a.seed),
         "--output-dir", os.path.join(work, "packed")] + sorted(glob.glob(os.path.join(work, "tokens", "*.bin"))))
    out = sorted(glob.glob(os.path.join(work, "packed", "packed*.bin")))
    assert len(out) == 1, out
    return read_packed(out[0])


def pack_in_python(docs, txt_doc, copies, a):
    """No loom tools: Python sentencepiece, and concat / best-fit decreasing as docs/PACK.md states them."""
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=a.model)
    bos, eos = sp.bos_id(), sp.eos_id()
    one = [[bos] + sp.encode(d) + [eos] for d in docs]
    if txt_doc == "file":
        ids = [bos] + sp.encode("\n".join([docs[0]] * copies)) + [eos]
        seqs = [ids]
    else:
        seqs = one * copies
    L = a.seq_len
    dtype = "<u2" if sp.get_piece_size() <= 65536 else "<u4"
    packs = []  # each: list of (doc, doc_pos, length)
    if txt_doc == "file":
        strategy = 0
        cur, room = [], L
        for d, s in enumerate(seqs):
            pos = 0
            while pos < len(s):
                n = min(room, len(s) - pos)
                cur.append((d, pos, n))
                pos += n
                room -= n
                if room == 0:
                    packs.append(cur)
                    cur, room = [], L
        if cur:
            packs.append(cur)
    else:
        strategy = 1
        chunks = []
        for d, s in enumerate(seqs):
            for pos in range(0, len(s), L):
                chunks.append((d, pos, min(L, len(s) - pos)))
        chunks.sort(key=lambda c: (-c[2], c[0]))
        rooms = []
        for c in chunks:
            best = None
            for i, r in enumerate(rooms):
                if r >= c[2] and (best is None or r < rooms[best]):
                    best = i
            if best is None:
                packs.append([])
                rooms.append(L)
                best = len(packs) - 1
            packs[best].append(c)
            rooms[best] -= c[2]
        order = np.random.default_rng(a.seed).permutation(len(packs))
        packs = [packs[i] for i in order]
    tokens = np.full(len(packs) * L, eos, dtype=dtype)
    offsets, segs = [0], []
    for p, pk in enumerate(packs):
        start = 0
        for d, pos, n in pk:
            tokens[p * L + start: p * L + start + n] = seqs[d][pos: pos + n]
            segs.append((d, start, n, pos, 1 if pos + n == len(seqs[d]) else 0))
            start += n
        offsets.append(len(segs))
    hdr = dict(vocab=sp.get_piece_size(), bos=bos, eos=eos, flags=3, seq_len=L, pad_id=eos, strategy=strategy,
               num_docs=len(seqs), fingerprint=xxhash.xxh64_intdigest(open(a.model, "rb").read()), seed=a.seed,
               num_packs=len(packs))
    return hdr, tokens, np.asarray(offsets, dtype="<u8"), np.array(segs, dtype=SEG_DTYPE)


def fullest_packs(tokens, seg_offsets, segments, n, L):
    """The n packs with the most real tokens, in their order: the measured steps see the padding
    a packer leaves on a long input, not the tail of a short one."""
    fill = np.array([int(segments["length"][seg_offsets[p]: seg_offsets[p + 1]].sum())
                     for p in range(len(seg_offsets) - 1)])
    keep = np.sort(np.argsort(-fill, kind="stable")[:n])
    segs = np.concatenate([segments[seg_offsets[p]: seg_offsets[p + 1]] for p in keep])
    offsets = np.concatenate([[0], np.cumsum([seg_offsets[p + 1] - seg_offsets[p] for p in keep])]).astype(np.int64)
    toks = np.concatenate([tokens[p * L: (p + 1) * L] for p in keep])
    return np.ascontiguousarray(toks), offsets, segs


def text_mode(a):
    docs, txt_doc = text_documents(read_text(a.text), a.docs)
    tools = find_tools(a.tools)
    print("make_packed: --docs %s: %d documents a copy of %s; %s" % (
        a.docs, len(docs), a.text, "loom-tokenize + loom-pack of %s" % os.path.dirname(os.path.dirname(tools[0]))
        if tools else "no loom-tokenize/loom-pack built: Python sentencepiece and packer"), file=sys.stderr)
    est_tokens = max(1, sum(len(d) for d in docs) // 4)  # ~4 characters a token (English, InternLM's model)
    copies = max(1, math.ceil(1.15 * a.packs * a.seq_len / est_tokens))
    work = tempfile.mkdtemp(prefix="loom-make-packed-")
    try:
        while True:
            hdr, tokens, seg_offsets, segments = (pack_with_tools(tools, docs, txt_doc, copies, a, work) if tools
                                                  else pack_in_python(docs, txt_doc, copies, a))
            # A few packs to spare: best-fit's last packs hold its leftovers, and are left out below.
            if hdr["num_packs"] >= a.packs + 2:
                break
            copies = math.ceil(copies * 1.3 * (a.packs + 2) / hdr["num_packs"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n, L = a.packs, a.seq_len
    tokens, seg_offsets, segments = fullest_packs(np.asarray(tokens), np.asarray(seg_offsets, dtype=np.int64),
                                                  segments, n, L)
    write_packed(a.out, tokens, seg_offsets, segments, hdr["vocab"], hdr["bos"],
                 hdr["eos"], hdr["flags"], L, hdr["pad_id"], hdr["strategy"], hdr["num_docs"], hdr["fingerprint"],
                 hdr["seed"])
    return dict(text=os.path.relpath(a.text, ROOT) if a.text.startswith(ROOT) else a.text, copies=copies,
                tools="loom" if tools else "python")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--packs", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=103168, help="random mode only (text modes: the model's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--docs", choices=["random", "cuts", "one", "paragraphs", "sft16"], default="random")
    ap.add_argument("--text", default=os.path.join(ROOT, "tests", "data", "botchan.txt"))
    ap.add_argument("--model", default=os.path.join(ROOT, "tests", "data", "internlm_v7.model"))
    ap.add_argument("--tools", help="build folder with tokenize/loom-tokenize and packer/loom-pack")
    ap.add_argument("--python-only", action="store_true", help="text modes: never the loom tools")
    ap.add_argument("--stats-json", help="also write the statistics line here")
    a = ap.parse_args()
    extra = {}
    if a.python_only:
        a.tools = "/nonexistent"
    if a.docs == "random":
        tokens, offsets, segs, num_docs = random_docs(a)
        write_packed(a.out, tokens, offsets, segs, a.vocab, 1, 2, 0, a.seq_len, 2, 0, num_docs, 0, a.seed)
    elif a.docs == "cuts":
        extra = cut_text(a)
    else:
        extra = text_mode(a)
    _, _, seg_offsets, segments = read_packed(a.out)
    s = stats(seg_offsets, segments, a.seq_len, a.docs)
    s.update(extra)
    line = json.dumps(s)
    print(line, flush=True)
    if a.stats_json:
        with open(a.stats_json, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
