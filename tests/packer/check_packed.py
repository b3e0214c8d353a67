"""Independent check of loom-pack's packed shards, with the numpy readers of docs/FORMAT.md.

usage: check_packed.py STRATEGY SOURCE_DIR PACKED.bin...
SOURCE_DIR holds the loom token shards given to `loom-pack pack`, in sorted name order.
Asserts that every source token is in exactly one segment, in order for concat, that documents
no longer than seq_len are never split for bestfit, that padding holds pad_id, and the checksums;
prints "packs=P segments=S tokens=T padding=D truncated=X".
"""
import glob, sys
import numpy as np
import xxhash


def read_loom_shard(bin_path):
    h = np.fromfile(bin_path + ".meta", dtype=np.uint8, count=128)
    assert bytes(h[:8]) == b"LOOMTOK\0", "not a loom shard"
    version, header_size, dtype_bytes, vocab_size = (int(x) for x in h[8:24].view("<u4"))
    num_docs, num_tokens = (int(x) for x in h[40:56].view("<u8"))
    offsets = np.fromfile(bin_path + ".meta", dtype="<u8", offset=header_size)
    tokens = np.memmap(bin_path, dtype={2: "<u2", 4: "<u4"}[dtype_bytes], mode="r")
    assert len(offsets) == num_docs + 1 and len(tokens) == num_tokens
    return [tokens[offsets[i]:offsets[i + 1]] for i in range(num_docs)]


def read_packed_shard(bin_path):
    h = np.fromfile(bin_path + ".meta", dtype=np.uint8, count=128)
    assert bytes(h[:8]) == b"LOOMPACK", "not a loom packed shard"
    u32 = h[8:48].view("<u4")
    version, header_size, dtype_bytes, seq_len = int(u32[0]), int(u32[1]), int(u32[2]), int(u32[7])
    assert version == 1
    num_packs, num_segments = (int(x) for x in h[48:64].view("<u8"))
    meta = np.fromfile(bin_path + ".meta", dtype=np.uint8, offset=header_size)
    seg_offsets = meta[: 8 * (num_packs + 1)].view("<u8")
    seg = np.dtype([("doc", "<u8"), ("start", "<u4"), ("length", "<u4"), ("doc_pos", "<u4"), ("seg_flags", "<u4")])
    segments = meta[8 * (num_packs + 1):].view(seg)
    assert len(segments) == num_segments
    packs = np.memmap(bin_path, dtype={2: "<u2", 4: "<u4"}[dtype_bytes], mode="r").reshape(num_packs, seq_len)
    assert xxhash.xxh64(open(bin_path, "rb").read()).intdigest() == int(h[80:88].view("<u8")[0])
    assert xxhash.xxh64(meta.tobytes()).intdigest() == int(h[88:96].view("<u8")[0])
    return h, packs, [segments[seg_offsets[p]:seg_offsets[p + 1]] for p in range(num_packs)]


strategy, source_dir, packed_paths = sys.argv[1], sys.argv[2], sys.argv[3:]
docs = [d for path in sorted(glob.glob(source_dir + "/*.bin")) for d in read_loom_shard(path)]
covered = [[] for _ in docs]  # (doc_pos, length, ends) per document
order = []                    # (doc, doc_pos) in pack order
num_packs = num_segments = padding = 0
for path in packed_paths:
    h, packs, segs = read_packed_shard(path)
    u32 = h[8:48].view("<u4")
    seq_len, pad_id, strat = int(u32[7]), int(u32[8]), int(u32[9])
    assert strat == {"concat": 0, "bestfit": 1}[strategy]
    assert int(h[72:80].view("<u8")[0]) == len(docs)
    for p in range(len(packs)):
        pos, row = 0, np.asarray(packs[p])
        for s in segs[p]:
            doc, start, length, doc_pos = int(s["doc"]), int(s["start"]), int(s["length"]), int(s["doc_pos"])
            assert length >= 1 and start >= pos and start + length <= seq_len
            assert (row[pos:start] == pad_id).all()
            assert (row[start:start + length] == docs[doc][doc_pos:doc_pos + length]).all(), (p, doc)
            covered[doc].append((doc_pos, length, bool(s["seg_flags"] & 1)))
            order.append((doc, doc_pos))
            pos = start + length
        assert (row[pos:] == pad_id).all()
        padding += seq_len - sum(int(s["length"]) for s in segs[p])
    num_packs += len(packs)
    num_segments += sum(len(s) for s in segs)
truncated = 0
for d, doc in enumerate(docs):
    parts = sorted(covered[d])
    at = 0
    for i, (doc_pos, length, ends) in enumerate(parts):
        assert doc_pos == at and ends == (i + 1 == len(parts)), d
        at += length
    assert at == len(doc), d
    truncated += len(parts) > 1
    if strategy == "bestfit":
        assert len(parts) == (len(doc) + seq_len - 1) // seq_len, d
if strategy == "concat":
    assert order == sorted(order)
print("packs=%d segments=%d tokens=%d padding=%d truncated=%d" % (
    num_packs, num_segments, sum(len(d) for d in docs), padding, truncated))
