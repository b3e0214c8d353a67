"""An independent reference of loom-dedup's MinHash (dedup/include/loom/dedup/minhash.h, docs/DEDUP.md):
reads a loom shard and the signatures and band-key files loom-dedup wrote for it (source 0) with
numpy, recomputes every value from the specification with Python integers and xxhash, and exits 1
on the first difference.

usage: minhash_ref.py SHARD.bin WORK_DIR NGRAM BANDS ROWS SEED
"""
import struct
import sys

import numpy as np
import xxhash

P = (1 << 61) - 1
M64 = (1 << 64) - 1


def permutations(seed, count):
    state, out = seed, []

    def nxt():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    for _ in range(count):
        a = 1 + nxt() % (P - 1)
        b = nxt() % P
        out.append((a, b))
    return out


def read_shard(path):
    meta = open(path + ".meta", "rb").read()
    dtype_bytes, = struct.unpack_from("<I", meta, 16)
    n, = struct.unpack_from("<Q", meta, 40)
    offsets = np.frombuffer(meta, dtype="<u8", offset=128, count=n + 1)
    ids = np.fromfile(path, dtype="<u2" if dtype_bytes == 2 else "<u4")
    return [ids[offsets[i]:offsets[i + 1]].astype("<u4") for i in range(n)]


def shingles(doc, n):
    raw = doc.tobytes()
    if len(doc) == 0:
        return []
    if len(doc) < n:
        return [xxhash.xxh64_intdigest(raw)]
    return [xxhash.xxh64_intdigest(raw[4 * j:4 * (j + n)]) for j in range(len(doc) - n + 1)]


def read_work(path, kind):
    """The documented reader: a 64-byte header, then u64 records."""
    head = open(path, "rb").read(64)
    magic, version, k, record_bytes, aux, count, params, rec_hash = struct.unpack_from("<8sIIIIQQQ", head)
    assert magic == b"LOOMDDP\0" and version == 1 and k == kind, (path, magic, version, k)
    records = np.fromfile(path, dtype="<u8", offset=64).reshape(count, record_bytes // 8)
    assert xxhash.xxh64_intdigest(records.tobytes()) == rec_hash, path + ": records checksum"
    return records, aux


def fail(msg):
    print("MISMATCH:", msg)
    sys.exit(1)


def main():
    shard, work, ngram, bands, rows, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
    docs = read_shard(shard)
    perms = permutations(seed, bands * rows)
    sigs, _ = read_work(work + "/sources/00000.sig", 1)
    if sigs.shape != (len(docs), 3 + bands * rows):
        fail("signatures shape %s" % (sigs.shape,))
    want_bands = [[] for _ in range(bands)]
    exact = []
    for i, doc in enumerate(docs):
        raw = doc.tobytes()
        h0, h1 = xxhash.xxh64_intdigest(raw, 0), xxhash.xxh64_intdigest(raw, 1)
        if list(map(int, sigs[i, :3])) != [len(doc), h0, h1]:
            fail("document %d: length/exact key %s vs %s" % (i, sigs[i, :3], [len(doc), h0, h1]))
        xs = np.array([x % P for x in shingles(doc, ngram)], dtype=object)
        sig = [int(((a * xs + b) % P).min()) if len(xs) else P for a, b in perms]
        if list(map(int, sigs[i, 3:])) != sig:
            fail("document %d: signature differs at hash %d" % (i, next(k for k in range(len(sig)) if sig[k] != sigs[i, 3 + k])))
        doc_id = i  # source 0
        exact.append((h0, doc_id))
        if len(doc):
            for band in range(bands):
                key = xxhash.xxh64_intdigest(np.array(sig[band * rows:(band + 1) * rows], dtype="<u8").tobytes())
                want_bands[band].append((key, doc_id))
    for band in range(bands + 1):
        name = "exact" if band == bands else str(band)
        got, aux = read_work(work + "/sources/00000.band-" + name, 2)
        want = sorted(exact if band == bands else want_bands[band])
        if aux != band or [tuple(map(int, r)) for r in got] != want:
            fail("band %s keys differ" % name)
    print("ok %d documents, %d hashes" % (len(docs), bands * rows))


main()
