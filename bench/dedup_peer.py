#!/usr/bin/python3
"""The numpy peer of loom-dedup's signatures, and the corpus of bench/dedup_bench.sh.

  dedup_peer.py signatures SHARD.bin OUT.npy [--ngram 5 --bands 14 --rows 8 --seed 1]
                [--hash xxhash|numpy] [--processes N]
      loom's MinHash (docs/DEDUP.md, "The MinHash") of every document of a loom token shard, the way
      datatrove's MinhashDedupSignature computes MinHash with numpy: each document's shingles as a
      numpy uint64 array, then the H permutations vectorized over [shingles x H] and the minimum
      over the shingles. Writes a (documents, H) '<u8' .npy and prints one line: documents,
      shingles, and the process CPU seconds of the two parts (hashing; permutations + min).
      --hash xxhash (the default when python3-xxhash imports): XXH64 of each n-gram's bytes by
      xxhash.xxh64_intdigest, one Python call per n-gram, as datatrove hashes each n-gram (its
      default HashConfig, xxhash at 64 bits: datatrove.utils.hashes.xxhash's xxhash64, which is
      xxhash.xxh64_intdigest). --hash numpy: XXH64 in numpy,
      vectorized over every n-gram of the shard at once (no python3-xxhash needed).
      --processes N: the documents cut into N contiguous parts of about equal tokens, one process
      each (multiprocessing, fork); the CPU seconds are summed over them.
  dedup_peer.py compare LOOM.sig PEER.npy
      Exits 1 unless loom-dedup's signatures work file (W/sources/SSSSS.sig, read as docs/DEDUP.md's
      numpy reader reads it) holds exactly the peer's signatures.
  dedup_peer.py corpus OUT.txt COPIES LINES FILE...
      Real text with real duplicates: each FILE's non-empty lines, LINES to a document (documents
      separated by a blank line, for `loom-tokenize --txt-doc paragraph`), COPIES times; in every
      copy after the first, a document is (seeded) 40% an exact copy, 35% a near copy (one of its
      lines replaced by another line of the file), 15% rewritten (half of its lines replaced) and
      10% left out. Prints the documents and bytes written.
  dedup_peer.py selftest
      The peer's signatures (both hashings) against Python integers on edge cases; exits 1 on a
      difference.

Exactness: h_i(x) = (a_i x + b_i) mod P, P = 2^61 - 1, needs the 122-bit product. datatrove's
`(shingles * a + b) % P` wraps at 2^64; here a and x are cut into 32-bit limbs (a = a1 2^32 + a0,
a1 < 2^29) and the partial products folded with 2^61 = 1 (mod P), every intermediate below 2^64.
The permutations run over a block of whole documents at a time (about BLOCK shingles, in three
reused arrays) with np.minimum.reduceat for the per-document minimum: fewer numpy calls than
datatrove's one call per document, so a stronger peer on short documents.
"""
import argparse
import multiprocessing
import random
import struct
import sys
import time

import numpy as np

try:
    import xxhash
except ImportError:  # the GPU machine's python3 may lack it: --hash numpy needs nothing but numpy
    xxhash = None

P = (1 << 61) - 1
M64 = (1 << 64) - 1
BLOCK = 512  # shingles per permutation block: [BLOCK x H] uint64 arrays of 458 KB at H = 112 (cache)
U64 = np.uint64


def permutations(seed, count):
    """a_i, b_i from splitmix64 seeded with `seed`, as (count,) uint64 arrays (docs/DEDUP.md)."""
    state, a, b = seed, [], []

    def nxt():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    for _ in range(count):
        a.append(1 + nxt() % (P - 1))
        b.append(nxt() % P)
    return np.array(a, dtype=U64), np.array(b, dtype=U64)


def read_shard(path):
    """A loom token shard (docs/FORMAT.md's numpy reader): all ids as uint32, and the offsets."""
    h = np.fromfile(path + ".meta", dtype=np.uint8, count=128)
    if len(h) < 128 or bytes(h[:8]) != b"LOOMTOK\0":
        sys.exit(f"{path}.meta: not a loom shard (expected the LOOMTOK header)")
    _version, header_size, dtype_bytes, _vocab = h[8:24].view("<u4")
    num_docs, num_tokens = h[40:56].view("<u8")
    offsets = np.fromfile(path + ".meta", dtype="<u8", offset=int(header_size)).astype(np.int64)
    tokens = np.fromfile(path, dtype={2: "<u2", 4: "<u4"}[int(dtype_bytes)]).astype("<u4")
    if len(offsets) != num_docs + 1 or len(tokens) != num_tokens or offsets[-1] != num_tokens:
        sys.exit(f"{path}: {len(offsets) - 1} offsets and {len(tokens)} tokens, the header says {num_docs} and "
                 f"{num_tokens}")
    return tokens, offsets


# XXH64 (seed 0) in numpy, over many inputs of one length at once: the specification's steps on
# uint64 arrays (numpy's uint64 arithmetic wraps at 2^64, as XXH64's does).
P1, P2, P3, P4, P5 = (U64(0x9E3779B185EBCA87), U64(0xC2B2AE3D27D4EB4F), U64(0x165667B19E3779F9),
                      U64(0x85EBCA77C2B2AE63), U64(0x27D4EB2F165667C5))


def _rotl(x, r):
    return (x << U64(r)) | (x >> U64(64 - r))


def _round(acc, lane):
    return _rotl(acc + lane * P2, 31) * P1


def xxh64_windows(tokens, starts, n):
    """XXH64 (seed 0) of the 4n bytes of tokens[s..s+n) for every s in starts (uint64 array)."""
    t = tokens.astype(U64)
    pair = t[:-1] | (t[1:] << U64(32)) if len(t) > 1 else np.zeros(0, U64)  # the 8 bytes at each id
    length = 4 * n
    pos = 0  # in ids
    if length >= 32:
        v = [np.full(len(starts), (int(P1) + int(P2)) & M64, U64), np.full(len(starts), P2, U64),
             np.zeros(len(starts), U64), np.full(len(starts), (-int(P1)) & M64, U64)]
        while pos + 8 <= n:
            for i in range(4):
                v[i] = _round(v[i], pair[starts + pos + 2 * i])
            pos += 8
        h = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
        for i in range(4):
            h = (h ^ _round(U64(0), v[i])) * P1 + P4
    else:
        h = np.full(len(starts), P5, U64)
    h = h + U64(length)
    while pos + 2 <= n:
        h = _rotl(h ^ _round(U64(0), pair[starts + pos]), 27) * P1 + P4
        pos += 2
    if pos < n:
        h = _rotl(h ^ (t[starts + pos] * P1), 23) * P2 + P3
    h ^= h >> U64(33)
    h *= P2
    h ^= h >> U64(29)
    h *= P3
    return h ^ (h >> U64(32))


def shingles_numpy(tokens, offsets, n):
    """Every document's shingles, back to back (uint64), and each document's count."""
    lengths = np.diff(offsets)
    counts = np.where(lengths >= n, lengths - n + 1, np.minimum(lengths, 1))
    out = np.empty(int(counts.sum()), U64)
    first = np.concatenate(([0], np.cumsum(counts)))[:-1]
    long_docs = np.flatnonzero(lengths >= n)
    if len(long_docs):  # the window starts of each long document, back to back
        c = counts[long_docs]
        idx = np.repeat(first[long_docs] - np.concatenate(([0], np.cumsum(c)))[:-1], c) + np.arange(c.sum())
        starts = np.repeat(offsets[long_docs] - np.concatenate(([0], np.cumsum(c)))[:-1], c) + np.arange(c.sum())
        out[idx] = xxh64_windows(tokens, starts, n)
    for length in range(1, n):  # a short document: one shingle, the XXH64 of all its ids
        docs = np.flatnonzero(lengths == length)
        if len(docs):
            out[first[docs]] = xxh64_windows(tokens, offsets[docs], length)
    return out, counts


def shingles_xxhash(tokens, offsets, n):
    """The same with one xxhash.xxh64_intdigest call per n-gram (datatrove's way)."""
    parts, counts = [], np.zeros(len(offsets) - 1, np.int64)
    h = xxhash.xxh64_intdigest
    for d in range(len(offsets) - 1):
        raw = memoryview(tokens[offsets[d]:offsets[d + 1]].tobytes())
        length = len(raw) // 4
        if length == 0:
            continue
        if length < n:
            parts.append(np.array([h(raw)], U64))
        else:
            parts.append(np.fromiter((h(raw[4 * j:4 * (j + n)]) for j in range(length - n + 1)), U64,
                                     count=length - n + 1))
        counts[d] = len(parts[-1])
    return (np.concatenate(parts) if parts else np.zeros(0, U64)), counts


def min_hashes(shingles, counts, a, b):
    """sig[d, i] = min over document d's shingles x of (a_i (x mod P) + b_i) mod P; P when none."""
    p, m32, m29 = U64(P), U64(0xFFFFFFFF), U64((1 << 29) - 1)
    a0, a1 = (a & m32)[None, :], (a >> U64(32))[None, :]
    a1x8, bb = (a1 << U64(3)), b[None, :]
    sig = np.full((len(counts), len(a)), p, U64)
    x = shingles % p
    x0s, x1s = x & m32, x >> U64(32)
    ends = np.cumsum(counts)
    starts = ends - counts
    bufs = [np.empty((0, len(a)), U64)] * 3  # r, t, m: reused, so numpy allocates nothing a block
    d = 0
    while d < len(counts):  # a block: whole documents, about BLOCK shingles
        e = max(d + 1, int(np.searchsorted(ends, starts[d] + BLOCK, side="right")))
        lo_s, hi_s = int(starts[d]), int(ends[e - 1])
        if hi_s - lo_s > len(bufs[0]):
            bufs = [np.empty((max(hi_s - lo_s, 2 * BLOCK), len(a)), U64) for _ in range(3)]
        r, t, m = (buf[:hi_s - lo_s] for buf in bufs)
        x0, x1 = x0s[lo_s:hi_s, None], x1s[lo_s:hi_s, None]
        np.multiply(x0, a0, out=t)                    # < 2^64
        np.bitwise_and(t, p, out=r)
        np.right_shift(t, U64(61), out=t)             # 2^61 = 1 (mod P)
        r += t
        np.multiply(x0, a1, out=m)
        np.multiply(x1, a0, out=t)
        m += t                                        # < 2^62, times 2^32:
        np.bitwise_and(m, m29, out=t)
        np.left_shift(t, U64(32), out=t)
        r += t                                        # its low 29 bits times 2^32
        np.right_shift(m, U64(29), out=m)
        r += m                                        # its high bits times 2^61 = 1
        np.multiply(x1, a1x8, out=t)
        r += t                                        # x1 a1 2^64 = 8 x1 a1 (mod P)
        r += bb                                       # r < 2^63: fold once more
        np.right_shift(r, U64(61), out=t)
        np.bitwise_and(r, p, out=r)
        r += t
        np.subtract(r, p, out=t)
        np.minimum(r, t, out=r)                       # r - P wraps above 2^63 when r < P
        seg = starts[d:e] - lo_s
        nonempty = counts[d:e] > 0
        if nonempty.any():
            sig[d:e][nonempty] = np.minimum.reduceat(r, seg[nonempty], axis=0)
        d = e
    return sig


def work_part(job):
    """One process's documents [d0, d1): (signatures, hashing CPU s, permutations CPU s, shingles)."""
    tokens, offsets, args, d0, d1 = job
    a, b = permutations(args.seed, args.bands * args.rows)
    off = offsets[d0:d1 + 1]
    c0 = time.process_time()
    if args.hash == "xxhash":
        sh, counts = shingles_xxhash(tokens, off, args.ngram)
    else:
        sh, counts = shingles_numpy(tokens, off, args.ngram)
    c1 = time.process_time()
    sig = min_hashes(sh, counts, a, b)
    c2 = time.process_time()
    return sig, c1 - c0, c2 - c1, len(sh)


_SHARED = None  # the shard, inherited by forked workers


def _work_shared(rng):
    tokens, offsets, args = _SHARED
    return work_part((tokens, offsets, args, rng[0], rng[1]))


def signatures(args):
    global _SHARED
    if args.hash == "xxhash" and xxhash is None:
        sys.exit("python3-xxhash is missing: use --hash numpy")
    t0 = time.monotonic()
    tokens, offsets = read_shard(args.shard)
    docs = len(offsets) - 1
    if args.processes <= 1:
        parts = [work_part((tokens, offsets, args, 0, docs))]
    else:  # contiguous parts of about equal tokens
        cuts = np.searchsorted(offsets, np.linspace(0, offsets[-1], args.processes + 1)[1:-1])
        bounds = [0] + sorted(set(int(c) for c in cuts if 0 < c < docs)) + [docs]
        _SHARED = (tokens, offsets, args)
        with multiprocessing.get_context("fork").Pool(len(bounds) - 1) as pool:
            parts = pool.map(_work_shared, list(zip(bounds[:-1], bounds[1:])))
    sig = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, args.bands * args.rows), U64)
    np.save(args.out, sig.astype("<u8"))
    print(f"peer ({args.hash} hashing, {max(args.processes, 1)} process(es)): {docs} documents, {len(tokens)} tokens, "
          f"{sum(p[3] for p in parts)} shingles; hashing {sum(p[1] for p in parts):.3f} CPU s, permutations + min "
          f"{sum(p[2] for p in parts):.3f} CPU s; {time.monotonic() - t0:.3f} s wall")


def compare(args):
    head = open(args.loom, "rb").read(64)
    magic, version, kind, record_bytes, aux, n, _params, _checksum = struct.unpack_from("<8sIIIIQQQ", head)
    if magic != b"LOOMDDP\0" or version != 1 or kind != 1:
        sys.exit(f"{args.loom}: not a loom-dedup signatures file (magic {magic!r}, version {version}, kind {kind})")
    loom = np.fromfile(args.loom, dtype="<u8", offset=64).reshape(n, record_bytes // 8)[:, 3:]
    peer = np.load(args.peer)
    if loom.shape != peer.shape:
        sys.exit(f"signatures differ: {args.loom} holds {loom.shape} (documents, hashes), {args.peer} {peer.shape}")
    bad = np.argwhere(loom != peer)
    if len(bad):
        d, i = bad[0]
        sys.exit(f"signatures differ: {len(bad)} values, first document {d} hash {i}: loom {loom[d, i]}, "
                 f"peer {peer[d, i]}")
    print(f"identical signatures: {loom.shape[0]} documents x {aux} hashes")


def corpus(args):
    rng = random.Random(1)
    out, docs = [], 0
    for path in args.files:
        lines = [s.strip() for s in open(path, encoding="utf-8-sig")]
        lines = [s for s in lines if s]
        originals = [lines[i:i + args.lines] for i in range(0, len(lines), args.lines)]
        for copy in range(args.copies):
            for doc in originals:
                doc = list(doc)
                u = rng.random()
                if copy > 0 and u >= 0.4:
                    if u >= 0.9:
                        continue
                    for k in rng.sample(range(len(doc)), 1 if u < 0.75 else max(1, len(doc) // 2)):
                        doc[k] = rng.choice(lines)
                out.append("\n".join(doc))
                docs += 1
    text = "\n\n".join(out) + "\n"
    open(args.out, "w", encoding="utf-8").write(text)
    print(f"{args.out}: {docs} documents, {len(text.encode())} bytes")


def selftest(_args):
    """The peer against the specification computed with Python integers (and, with python3-xxhash,
    its numpy XXH64 against xxhash's): short, empty and long documents, n-grams of 1 to 13 ids
    (XXH64's 32-byte stripes from 8 on), blocks of one document and of many, extreme values."""
    rng = np.random.default_rng(0)
    lengths = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 15, 16, 17, 40, 100, 1, 0]
    tokens = rng.integers(0, 1 << 32, sum(lengths), dtype=np.uint64).astype("<u4")
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    global BLOCK
    for n in (1, 2, 5, 8, 9, 13):
        a, b = permutations(3, 20)
        sh, counts = shingles_numpy(tokens, offsets, n)
        if xxhash is not None:
            want, want_counts = shingles_xxhash(tokens, offsets, n)
            assert sh.tolist() == want.tolist() and counts.tolist() == want_counts.tolist(), f"XXH64, ngram {n}"
        per_doc = np.split(sh, np.cumsum(counts)[:-1])
        want = [[min(((int(ai) * (int(x) % P) + int(bi)) % P for x in xs), default=P) for ai, bi in zip(a, b)]
                for xs in per_doc]
        for BLOCK in (1, 3, 512):
            assert min_hashes(sh, counts, a, b).tolist() == want, f"signatures, ngram {n}, block {BLOCK}"
    BLOCK = 512
    xs = np.array([0, 1, P - 1, P, P + 1, M64, 1 << 63, 1 << 61, (1 << 32) - 1, 1 << 32], U64)
    for a, b in (permutations(1, 112), (np.array([P - 1, 1, 1 << 32, (1 << 32) - 1, P - 2], U64),
                                         np.array([P - 1, 0, P - 1, 5, P - 1], U64))):
        got = min_hashes(xs, np.ones(len(xs), np.int64), a, b)
        assert got.tolist() == [[(int(ai) * (int(x) % P) + int(bi)) % P for ai, bi in zip(a, b)] for x in xs], "extremes"
    print(f"selftest ok: numpy XXH64 {'checked against python3-xxhash' if xxhash else 'not checked (no python3-xxhash)'}, "
          "signatures equal to Python integers' on 18 documents x 6 n-gram sizes and 10 extreme shingles")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("signatures")
    s.add_argument("shard")
    s.add_argument("out")
    for name, default in (("ngram", 5), ("bands", 14), ("rows", 8), ("seed", 1), ("processes", 1)):
        s.add_argument("--" + name, type=int, default=default)
    s.add_argument("--hash", choices=("xxhash", "numpy"), default="xxhash" if xxhash else "numpy")
    c = sub.add_parser("compare")
    c.add_argument("loom")
    c.add_argument("peer")
    k = sub.add_parser("corpus")
    k.add_argument("out")
    k.add_argument("copies", type=int)
    k.add_argument("lines", type=int)
    k.add_argument("files", nargs="+")
    sub.add_parser("selftest")
    args = ap.parse_args()
    {"signatures": signatures, "compare": compare, "corpus": corpus, "selftest": selftest}[args.cmd](args)


if __name__ == "__main__":
    main()
