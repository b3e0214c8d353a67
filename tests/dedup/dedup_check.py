"""Shared by the Python tests of loom-dedup (exact_test.py, near_recall_test.py, real_text_test.py,
verify_test.py): loom token shards read and written with numpy from docs/FORMAT.md, loom-tokenize and
loom-dedup run as binaries, exact n-gram sets and Jaccard similarities, the clusters that a run's
report implies, and the comparison of the pairs found with the LSH curve 1 - (1 - s^r)^b.

Nothing here uses loom's code: n-grams are tuples of ids (compared exactly, not hashed), so the sets
are loom's shingle sets (docs/DEDUP.md) up to 64-bit hash collisions, and their Jaccard is loom's.

Every test script takes: SOURCE_DIR LOOM_DEDUP LOOM_TOKENIZE TMP_PARENT.
"""
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import xxhash

NGRAM, BANDS, ROWS = 5, 14, 8  # loom-dedup's defaults
SHORT = 0xFFFFFFFF  # pads a document shorter than n into its one shingle; never a token id


class Env:
    def __init__(self, name):
        self.src, self.dedup, self.tokenize, parent = sys.argv[1:5]
        os.makedirs(parent, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix=name + ".", dir=parent)
        self.model = os.path.join(self.src, "tests/data/internlm_v7.model")
        self.failures = 0

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def check(self, ok, what, detail=""):
        if not ok:
            self.failures += 1
            print("FAIL", what, detail)
        return ok

    def finish(self):
        """Exit 1 on any failed check; the temporary folder is kept then, for a look."""
        if self.failures:
            print(f"{self.failures} check(s) failed; inputs and outputs kept in {self.tmp}")
            sys.exit(1)
        shutil.rmtree(self.tmp)
        print("ok")


# ---- shards (docs/FORMAT.md, "Token shard") ----

def read_shard(path):
    """(header dict, [np.uint32 arrays])."""
    meta = open(path + ".meta", "rb").read()
    magic, version, header_size, dtype_bytes, vocab, bos, eos, flags = struct.unpack_from("<8sIIIIiiI", meta)
    assert magic == b"LOOMTOK\0" and version == 1, path
    num_docs, num_tokens = struct.unpack_from("<QQ", meta, 40)
    fingerprint, = struct.unpack_from("<Q", meta, 72)
    offsets = np.frombuffer(meta, dtype="<u8", offset=header_size, count=num_docs + 1)
    ids = np.fromfile(path, dtype={2: "<u2", 4: "<u4"}[dtype_bytes]).astype(np.uint32)
    assert len(ids) == num_tokens, path
    head = dict(vocab=vocab, bos=bos, eos=eos, flags=flags, fingerprint=fingerprint)
    return head, [ids[offsets[i]:offsets[i + 1]] for i in range(num_docs)]


def write_shard(path, docs, head):
    """A loom shard of docs with head's tokenizer (vocab, bos, eos, flags, model fingerprint)."""
    dtype = "<u2" if head["vocab"] <= 65536 else "<u4"
    data = np.concatenate([np.asarray(d, dtype=np.uint32) for d in docs] + [np.zeros(0, np.uint32)]).astype(dtype)
    offsets = np.zeros(len(docs) + 1, dtype="<u8")
    offsets[1:] = np.cumsum([len(d) for d in docs])
    meta = struct.pack("<8sIIIIiiIIQQQQQIIQ32x", b"LOOMTOK\0", 1, 128, np.dtype(dtype).itemsize, head["vocab"],
                       head["bos"], head["eos"], head["flags"], 0, len(docs), len(data),
                       xxhash.xxh64_intdigest(data.tobytes()), xxhash.xxh64_intdigest(offsets.tobytes()),
                       head["fingerprint"], 0, 0, 0)
    assert len(meta) == 128
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data.tofile(path)
    with open(path + ".meta", "wb") as f:
        f.write(meta + offsets.tobytes())


def text_lines(env, name):
    """The non-empty lines of tests/data/NAME, stripped (Python's universal newlines)."""
    with open(os.path.join(env.src, "tests/data", name), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def tokenize(env, texts, name):
    """texts (non-empty) tokenized by loom-tokenize with internlm_v7.model, bos and eos: (head, docs)."""
    assert all(t.strip() for t in texts)
    src = env.path("text", name + ".jsonl")
    os.makedirs(os.path.dirname(src), exist_ok=True)
    with open(src, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    run([env.tokenize, "--model", env.model, "--output-dir", env.path("tok"), "--threads", "1", src])
    head, docs = read_shard(env.path("tok", name + ".bin"))
    assert len(docs) == len(texts), (len(docs), len(texts))
    return head, docs


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        print(" ".join(args), "\n", r.stdout, r.stderr)
        raise SystemExit(f"{os.path.basename(args[0])} exited {r.returncode}")
    return r


# ---- n-gram sets and Jaccard ----

def shingle_ids(docs, n=NGRAM):
    """Per document, the sorted ids of its distinct n-grams (ids shared by all documents given): the n-gram
    tuples t[j..j+n), or for 0 < L < n the whole document as one shingle, none for an empty one."""
    rows, owner = [], []
    for k, d in enumerate(docs):
        d = np.asarray(d, dtype=np.uint32)
        if len(d) >= n:
            w = np.lib.stride_tricks.sliding_window_view(d, n)
        elif len(d):
            w = np.full((1, n), SHORT, dtype=np.uint32)
            w[0, :len(d)] = d
        else:
            continue
        rows.append(w)
        owner.append(np.full(len(w), k))
    if not rows:
        return [np.zeros(0, np.int64) for _ in docs]
    allrows = np.ascontiguousarray(np.concatenate(rows)).view(np.dtype((np.void, 4 * n))).ravel()
    _, inverse = np.unique(allrows, return_inverse=True)
    owner = np.concatenate(owner)
    order = np.lexsort((inverse, owner))
    inverse, owner = inverse[order], owner[order]
    keep = np.ones(len(inverse), bool)
    keep[1:] = (inverse[1:] != inverse[:-1]) | (owner[1:] != owner[:-1])
    inverse, owner = inverse[keep], owner[keep]
    bounds = np.searchsorted(owner, np.arange(len(docs) + 1))
    return [inverse[bounds[k]:bounds[k + 1]].astype(np.int64) for k in range(len(docs))]


def jaccard(a, b):
    """Exact Jaccard of two sorted id arrays (0 for two empty sets: they have no n-gram to share)."""
    inter = np.intersect1d(a, b, assume_unique=True).size
    union = a.size + b.size - inter
    return inter / union if union else 0.0


def all_pairs(sets):
    """Every pair (i < j) of documents that shares an n-gram, with its exact Jaccard: (i, j, J) arrays.
    Every other pair has Jaccard 0, so this is the brute force over all pairs without the zeros."""
    sizes = np.array([len(s) for s in sets])
    sh = np.concatenate(sets) if len(sets) else np.zeros(0, np.int64)
    doc = np.repeat(np.arange(len(sets)), sizes)
    order = np.lexsort((doc, sh))
    sh, doc = sh[order], doc[order]
    keys = []
    for k in range(1, len(sh)):
        same = sh[k:] == sh[:-k]
        if not same.any():
            break
        keys.append(doc[:-k][same] * len(sets) + doc[k:][same])  # doc[p] < doc[p + k] within an n-gram
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    key, inter = np.unique(np.concatenate(keys), return_counts=True)
    i, j = key // len(sets), key % len(sets)
    return i, j, inter / (sizes[i] + sizes[j] - inter)


# ---- loom-dedup and its report ----

def dedup(env, work, inputs, references=(), extra=()):
    """Runs loom-dedup; returns the report's lines as dicts."""
    args = [env.dedup, "--work-dir", env.path(work), "--output-dir", env.path(work + "-out")]
    for r in references:
        args += ["--reference", r]
    run(args + list(extra) + list(inputs))
    with open(env.path(work, "report.jsonl")) as f:
        return [json.loads(line) for line in f]


class Corpus:
    """Documents of several shards, numbered in loom's order (references, then inputs, each by index)."""

    def __init__(self):
        self.docs, self.where, self.index = [], [], {}

    def add(self, path, docs):
        for i, d in enumerate(docs):
            self.index[(path, i)] = len(self.docs)
            self.where.append((path, i))
            self.docs.append(np.asarray(d, dtype=np.uint32))

    def roots(self, report):
        """Each document's cluster, named by its kept document: with --keep first (the default) the
        report matches each removed document to its cluster's kept one, never removed itself; every
        other document is its own. (With --keep none the matched document is another member.)"""
        root = np.arange(len(self.docs))
        for r in report:
            if r["reason"] in ("exact", "near"):
                root[self.index[(r["input"], r["index"])]] = self.index[(r["matched_input"], r["matched_index"])]
        return root


# ---- the LSH curve ----

def lsh_probability(s, rows=ROWS, bands=BANDS):
    """The probability that a pair of Jaccard s shares at least one of `bands` keys of `rows` MinHashes."""
    return 1.0 - (1.0 - np.asarray(s, dtype=float) ** rows) ** bands


BUCKETS = [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0000001)]


def compare_with_curve(sims, found, rows=ROWS, bands=BANDS, buckets=BUCKETS, quiet=False, min_pairs=1):
    """Per Jaccard bucket, the pairs found against the LSH curve. Each pair is found independently
    with probability p_i = lsh_probability(s_i), so a bucket's count has mean sum(p_i) and standard
    deviation sqrt(sum p_i (1 - p_i)) (the binomial's, of pairs with unequal p); a bucket passes when
    its count is within 3 of those deviations, plus one pair for the count being whole. Returns the
    failing buckets."""
    sims, found = np.asarray(sims, dtype=float), np.asarray(found, dtype=bool)
    bad = []
    if not quiet:
        print(f"  bucket        pairs  found  expected  3 sigma+1   (rows {rows}, bands {bands})")
    for lo, hi in buckets:
        m = (sims >= lo) & (sims < hi)
        if m.sum() < min_pairs:
            continue
        p = lsh_probability(sims[m], rows, bands)
        want, tol = p.sum(), 3 * math.sqrt((p * (1 - p)).sum()) + 1
        got = int(found[m].sum())
        ok = abs(got - want) <= tol
        if not quiet:
            print(f"  [{lo:.1f}, {min(hi, 1):.1f}{')' if hi < 1 else ']'}  {m.sum():6d} {got:6d} {want:9.1f} {tol:10.1f}"
                  f"   {got / m.sum():.3f} vs {want / m.sum():.3f}{'' if ok else '  OUTSIDE'}")
        if not ok:
            bad.append((lo, hi, int(m.sum()), got, want, tol))
    return bad


def check_curve(env, what, sims, found, min_pairs=1):
    """The curve of loom's settings must fit; those of one row or band more or less must not (the test
    tells them apart, so a wrong rows or bands in loom would fail it)."""
    bad = compare_with_curve(sims, found, min_pairs=min_pairs)
    env.check(not bad, what + ": pairs found per Jaccard bucket against 1-(1-s^8)^14", str(bad))
    for rows, bands in ((ROWS - 1, BANDS), (ROWS + 1, BANDS)):
        wrong = compare_with_curve(sims, found, rows, bands, quiet=True, min_pairs=min_pairs)
        print(f"  against rows {rows}, bands {bands}: {len(wrong)} bucket(s) outside")
        env.check(bool(wrong), f"{what}: the counts also fit rows {rows}, bands {bands}: too few pairs to tell")


# ---- planted near copies ----

def edit_copy(rng, doc, kind, target, pool):
    """A copy of doc by token substitutions, insertions or deletions at random inner positions (bos
    and eos stay), as many as take the 5-gram Jaccard of a document of m n-grams to about target when
    no two edits share an n-gram: k substitutions give (m - 5k) / (m + 5k), k insertions
    (m - 4k) / (m + 5k), k deletions (m - 5k) / (m + 4k). Edits that land close together give a
    higher Jaccard; the test measures every pair's exactly anyway."""
    d = list(map(int, doc))
    m = len(d) - NGRAM + 1
    k = max(1, round(m * (1 - target) / {"sub": 5 * (1 + target), "ins": 4 + 5 * target, "del": 5 + 4 * target}[kind]))
    k = min(k, len(d) - 2)
    positions = sorted(rng.sample(range(1, len(d) - 1), k), reverse=True)
    for j in positions:
        if kind == "sub":
            d[j] = pool[rng.randrange(len(pool))]
        elif kind == "ins":
            d.insert(j, pool[rng.randrange(len(pool))])
        else:
            del d[j]
    return d


def reordered(rng, lines):
    """lines with k of them (2 to all) shuffled among their own positions, never the same order."""
    k = rng.randint(2, len(lines))
    at = sorted(rng.sample(range(len(lines)), k))
    moved = at[:]
    while moved == at:
        rng.shuffle(moved)
    out = lines[:]
    for dst, src in zip(at, moved):
        out[dst] = lines[src]
    return out


class Planted:
    """Originals (real text) and one near copy of each, in two shards: in/orig.bin (the originals) and
    in/copies.bin (the copies, shuffled). Copies are of four kinds: token substitutions, insertions,
    deletions (wagahaiwa's paragraphs and botchan's lines in fours) and reordered lines (botchan's
    lines in eights, tokenized after the reordering), each at a target Jaccard drawn uniformly from
    [0.42, 1). Originals that share more than a tenth of their n-grams with another original are left
    out, so that no copy can join its original's cluster through a third document."""

    def __init__(self, env, seed, max_edit=900):
        rng = random.Random(seed)
        bot, wag = text_lines(env, "botchan.txt"), text_lines(env, "wagahaiwa_nekodearu.txt")
        half = len(bot) // 2
        groups = [bot[i:i + 8] for i in range(0, half - 7, 8)]
        texts = ["\n".join(g) for g in groups] + ["\n".join(reordered(rng, g)) for g in groups]
        texts += ["\n".join(bot[i:i + 4]) for i in range(half, len(bot) - 3, 4)] + wag
        self.head, docs = tokenize(env, texts, "planted")
        n = len(groups)
        originals = [(docs[i], docs[n + i], "reorder") for i in range(n)]
        edit = [d for d in docs[2 * n:] if 40 <= len(d) <= 600]
        rng.shuffle(edit)
        pool = [int(t) for d in edit for t in d[1:-1]]
        kinds = ("sub", "ins", "del")
        originals += [(d, None, kinds[i % 3]) for i, d in enumerate(edit[:max_edit])]
        sets = shingle_ids([o[0] for o in originals])
        i, j, sims = all_pairs(sets)
        close = set(j[sims > 0.1].tolist())  # the later of each close pair goes
        self.orig, self.copies, self.kind = [], [], []
        for k, (d, copy, kind) in enumerate(originals):
            if k in close:
                continue
            self.orig.append(d)
            self.copies.append(copy if copy is not None else edit_copy(rng, d, kind, rng.uniform(0.42, 1.0), pool))
            self.kind.append(kind)
        self.order = list(range(len(self.orig)))  # copies.bin holds copy order[i] at index i
        rng.shuffle(self.order)
        self.paths = [env.path("in/orig.bin"), env.path("in/copies.bin")]
        write_shard(self.paths[0], self.orig, self.head)
        write_shard(self.paths[1], [self.copies[k] for k in self.order], self.head)
        self.corpus = Corpus()
        self.corpus.add(self.paths[0], self.orig)
        self.corpus.add(self.paths[1], [self.copies[k] for k in self.order])
        # global numbers of each original and its copy, and their exact Jaccard
        self.o = np.arange(len(self.orig))
        self.c = len(self.orig) + np.argsort(self.order)
        sets = shingle_ids(self.corpus.docs)
        self.sets = sets
        self.sims = np.array([jaccard(sets[a], sets[b]) for a, b in zip(self.o, self.c)])
        print(f"{len(self.orig)} originals with one copy each ({len(originals) - len(self.orig)} left out as close "
              f"to another), kinds {dict((k, self.kind.count(k)) for k in ('sub', 'ins', 'del', 'reorder'))}")
