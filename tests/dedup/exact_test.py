"""loom-dedup --near=false against a Python set of token tuples: two inputs and a reference set of real
documents (botchan.txt and wagahaiwa_nekodearu.txt tokenized by loom-tokenize with internlm_v7.model),
with planted exact copies (within an input, across inputs, of reference documents), copies that are
near but not exact (one token changed, dropped or doubled, the first or last token dropped: the
shards are written without the bos/eos flags), duplicates inside the reference set, empty documents
and documents of 1 to 4 tokens. The removed set must be the documents whose tuple was seen before
(references first, then the inputs in order), each matched to that first occurrence; with --keep
none, every input document whose tuple occurs twice or more. The outputs and summary must agree.

usage: exact_test.py SOURCE_DIR LOOM_DEDUP LOOM_TOKENIZE TMP_PARENT
"""
import json
import random

import numpy as np

import dedup_check as dc


def base_documents(env):
    """botchan's first 400 lines in groups of 1 to 4, and wagahaiwa's first 300 lines (short dialogue
    lines among them repeat in the novel: natural exact duplicates)."""
    lines = dc.text_lines(env, "botchan.txt")[:400]
    texts, i, k = [], 0, 0
    while i < len(lines):
        m = 1 + k % 4
        texts.append("\n".join(lines[i:i + m]))
        i, k = i + m, k + 1
    texts += dc.text_lines(env, "wagahaiwa_nekodearu.txt")[:300]
    return dc.tokenize(env, texts, "exact_base")


def variant(rng, doc):
    """A copy near the original but not equal: one token changed, dropped or doubled, or the first or
    last token dropped (a prefix or suffix of the original)."""
    d = list(map(int, doc))
    if len(d) < 2:
        return d + [7]
    j = rng.randrange(len(d))
    kind = rng.randrange(5)
    if kind == 0:
        d[j] = 1000 + (d[j] * 7 + 13) % 90000
    elif kind == 1:
        del d[j]
    elif kind == 2:
        d.insert(j, d[j])
    elif kind == 3:
        del d[-1]
    else:
        del d[0]
    return d


def build(env):
    head, base = base_documents(env)
    rng = random.Random(7)
    head = dict(head, flags=0)  # documents without bos or eos too
    tiny = [[], [1], [2], [1, 2], [1, 5, 2], [1, 5, 6, 2], [1, 6, 5, 2], [5, 6], [5, 6, 2]]
    ref = [base[i] for i in range(0, 60)] + [base[3], base[10], []]
    shards = {"ref": ref, "a": [], "b": []}
    pool = base[60:]
    for name, n in (("a", 400), ("b", 300)):
        out = shards[name]
        for _ in range(n):
            r = rng.random()
            if r < 0.45 or not out:
                out.append(pool[rng.randrange(len(pool))])                      # mostly new, some repeats
            elif r < 0.60:
                out.append(out[rng.randrange(len(out))])                        # copy within the input
            elif r < 0.70:
                out.append(ref[rng.randrange(len(ref))])                        # copy of a reference
            elif r < 0.78 and name == "b":
                out.append(shards["a"][rng.randrange(len(shards["a"]))])        # copy across inputs
            elif r < 0.90:
                src = out if rng.random() < 0.5 else ref
                out.append(variant(rng, src[rng.randrange(len(src))]))          # near, not exact
            else:
                out.append(tiny[rng.randrange(len(tiny))])
    paths = {}
    for name, docs in shards.items():
        paths[name] = env.path("in", name + ".bin")
        dc.write_shard(paths[name], docs, head)
    return head, shards, paths


def expected(corpus, inputs, keep_none):
    """The input documents that a set (keep first) or a count (keep none) of token tuples removes, by
    global number, each mapped to the first document of equal tokens."""
    first, count = {}, {}
    for k, d in enumerate(corpus.docs):
        t = tuple(map(int, d))
        first.setdefault(t, k)
        count[t] = count.get(t, 0) + 1
    removed = {}
    for k, d in enumerate(corpus.docs):
        if corpus.where[k][0] not in inputs:
            continue
        t = tuple(map(int, d))
        if (count[t] >= 2) if keep_none else (first[t] != k):
            removed[k] = first[t]
    return removed


def check_run(env, corpus, paths, keep_none):
    what = "--keep none" if keep_none else "--keep first"
    inputs = [paths["a"], paths["b"]]
    report = dc.dedup(env, "keep-none" if keep_none else "keep-first", inputs, [paths["ref"]],
                      ["--near=false", "--keep", "none" if keep_none else "first"])
    want = expected(corpus, inputs, keep_none)
    got = {corpus.index[(r["input"], r["index"])]: r for r in report}
    print(f"{what}: {len(want)} removals expected (of {sum(len(corpus_docs(corpus, p)) for p in inputs)} "
          f"input documents), {len(got)} reported")
    env.check(set(got) == set(want), f"{what}: removed set", f"missing {sorted(set(want) - set(got))[:10]}, "
              f"extra {sorted(set(got) - set(want))[:10]}")
    for k, r in got.items():
        m = corpus.index[(r["matched_input"], r["matched_index"])]
        ok = (r["reason"] == "exact" and r["removed"] and r["jaccard"] == 1 and m != k
              and np.array_equal(corpus.docs[m], corpus.docs[k]) and r["tokens"] == len(corpus.docs[k])
              and r["matched_is_reference"] == (r["matched_input"] == paths["ref"]))
        if not keep_none and k in want:
            ok = ok and m == want[k]  # the first occurrence, a reference's when there is one
        env.check(ok, f"{what}: report line of {corpus.where[k]}", json.dumps(r))
    work = env.path("keep-none" if keep_none else "keep-first")
    for p in inputs:
        kept = [d for i, d in enumerate(corpus_docs(corpus, p)) if corpus.index[(p, i)] not in want]
        out = work + "-out/" + p.rsplit("/", 1)[1]
        got_docs = dc.read_shard(out)[1] if kept else []
        env.check(len(got_docs) == len(kept) and all(np.array_equal(x, y) for x, y in zip(got_docs, kept)),
                  f"{what}: output {out} is the input without the removed documents")
    summary = json.load(open(work + "/summary.json"))
    total = summary["total"]
    n_in = sum(len(corpus_docs(corpus, p)) for p in inputs)
    env.check(total["documents_in"] == n_in and total["documents_out"] == n_in - len(want)
              and total["removed"]["exact"]["documents"] == len(want) and total["removed"]["near"]["documents"] == 0,
              f"{what}: summary totals", json.dumps(total))


def corpus_docs(corpus, path):
    return [corpus.docs[k] for k in range(len(corpus.docs)) if corpus.where[k][0] == path]


def main():
    env = dc.Env("dedup_exact")
    _, shards, paths = build(env)
    corpus = dc.Corpus()
    for name in ("ref", "a", "b"):
        corpus.add(paths[name], shards[name])
    for keep_none in (False, True):
        check_run(env, corpus, paths, keep_none)
    env.finish()


main()
