#!/usr/bin/env python3
"""Writes a loom packed shard (docs/FORMAT.md, format version 1) of random documents, for the GPU
benchmark: the same data shape as real packs (several documents per pack, cut at pack ends) without
a tokenizer. Documents are uniform random ids in [3, vocab) with lengths drawn log-uniformly in
[64, 4 * seq_len]; packs are filled in order (strategy concat), a document cut at a pack end
continues in the next pack.

Usage: make_packed.py OUT.bin --seq-len 4096 --packs 64 [--vocab 103168] [--seed 0]
"""
import argparse
import struct

import numpy as np
import xxhash


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--packs", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=103168)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
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
    seg_dtype = np.dtype([("doc", "<u8"), ("start", "<u4"), ("length", "<u4"), ("doc_pos", "<u4"),
                          ("seg_flags", "<u4")])
    index = np.asarray(offsets, dtype="<u8").tobytes() + np.array(segs, dtype=seg_dtype).tobytes()
    body = tokens.tobytes()
    header = struct.pack("<8sIIIIiiIIII", b"LOOMPACK", 1, 128, 4, a.vocab, 1, 2, 0, L, 2, 0)
    header += struct.pack("<QQQQQQQQ", a.packs, len(segs), a.packs * L, doc + 1,
                          xxhash.xxh64_intdigest(body), xxhash.xxh64_intdigest(index), 0, a.seed)
    header += bytes(16)
    assert len(header) == 128
    with open(a.out, "wb") as f:
        f.write(body)
    with open(a.out + ".meta", "wb") as f:
        f.write(header + index)


if __name__ == "__main__":
    main()
