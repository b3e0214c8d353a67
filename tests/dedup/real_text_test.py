"""loom-dedup on real text against brute force: botchan.txt's lines in groups of 1 to 12 and every
paragraph (line) of wagahaiwa_nekodearu.txt as documents, tokenized by loom-tokenize with
internlm_v7.model, plus one near copy (dedup_check.edit_copy) of 1,400 of them, and 4 chains of 16
copies, each of the one before at Jaccard about 0.9 (their ends are below 0.3). The exact 5-gram
Jaccard of every pair of the sample is computed here (dedup_check.all_pairs); a pair is found when
loom-dedup puts both documents in one cluster, in each of two runs (the defaults with --seed 1 and 2:
other MinHash permutations, so the found events of one pair in the two runs are independent).

- Pairs of a bucket [0.3, 0.4) ... [0.9, 1.0] whose two documents have no other partner of Jaccard
  >= 0.2 (so that no third document can join them) are found as often as the mean of
  1 - (1 - s^8)^14 says, within 3 standard deviations of the bucket's count (dedup_check).
- Pairs below 0.3 in one cluster: counted, and those explained by transitivity (the two documents
  are connected by pairs of Jaccard >= 0.3 inside their cluster) told from merges that only a
  candidate pair below 0.3 explains; those must be no more than the curve expects over every pair
  below 0.3 (3 standard deviations, plus one).

usage: real_text_test.py SOURCE_DIR LOOM_DEDUP LOOM_TOKENIZE TMP_PARENT
"""
import math
import random

import numpy as np

import dedup_check as dc

COPIES, SEEDS = 1400, (1, 2)  # near copies of real documents; loom-dedup runs (--seed) over the sample
CHAINS, CHAIN_LINKS = 4, 16


def sample(env):
    lines = dc.text_lines(env, "botchan.txt")
    texts, i, k = [], 0, 0
    while i < len(lines):
        m = 1 + (k * 5) % 12
        texts.append("\n".join(lines[i:i + m]))
        i, k = i + m, k + 1
    texts += dc.text_lines(env, "wagahaiwa_nekodearu.txt")
    head, docs = dc.tokenize(env, texts, "real")
    rng = random.Random(5)
    pool = [int(t) for d in docs for t in d[1:-1]]
    originals = rng.sample([k for k, d in enumerate(docs) if 40 <= len(d) <= 600], COPIES)
    kinds = ("sub", "ins", "del")
    copies = [dc.edit_copy(rng, docs[k], kinds[n % 3], rng.uniform(0.42, 1.0), pool) for n, k in enumerate(originals)]
    # chains: each link a copy of the one before at Jaccard about 0.9, the ends far below 0.3
    starts = [k for k, d in enumerate(docs) if len(d) >= 200 and k not in set(originals)][:CHAINS]
    for k in starts:
        link = docs[k]
        for _ in range(CHAIN_LINKS):
            link = dc.edit_copy(rng, link, "sub", 0.9, pool)
            copies.append(link)
    path = env.path("in/real.bin")
    dc.write_shard(path, docs + copies, head)
    corpus = dc.Corpus()
    corpus.add(path, docs + copies)
    print(f"{len(docs)} documents of real text ({sum(map(len, docs))} tokens) and {len(copies)} near copies "
          f"({CHAINS} chains of {CHAIN_LINKS} among them)")
    return path, corpus


def components(nodes, edges):
    """The number of connected components of nodes under edges (pairs of nodes)."""
    parent = {n: n for n in nodes}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        parent[find(a)] = find(b)
    return len({find(n) for n in nodes})


def check_low_pairs(env, corpus, root, i, j, sims):
    same = root[i] == root[j]
    n_docs = len(corpus.docs)
    n_low_pairs = n_docs * (n_docs - 1) // 2 - int((sims >= 0.3).sum())  # all pairs below 0.3, zeros too
    clusters = {}
    for d, r in enumerate(root):
        clusters.setdefault(int(r), []).append(d)
    strong = same & (sims >= 0.3)
    low = sum(len(m) * (len(m) - 1) // 2 for m in clusters.values()) - int(strong.sum())
    by_cluster = {}
    for a, b in zip(i[strong], j[strong]):
        by_cluster.setdefault(int(root[a]), []).append((int(a), int(b)))
    # each cluster whose pairs >= 0.3 leave it in c pieces needed c - 1 candidate pairs below 0.3
    unexplained = sum(components(m, by_cluster.get(r, [])) - 1 for r, m in clusters.items() if len(m) > 1)
    p = dc.lsh_probability(sims[sims < 0.3])
    want, tol = p.sum(), 3 * math.sqrt((p * (1 - p)).sum()) + 1
    print(f"pairs below 0.3 in one cluster: {low} of {n_low_pairs} ({low / n_low_pairs:.2e}); "
          f"{unexplained} merge(s) not explained by pairs >= 0.3 in the cluster (the curve expects "
          f"{want:.2f} +- {tol:.2f} over those pairs)")
    env.check(unexplained <= want + tol, "merges through pairs below 0.3 no more than the LSH curve expects")


def check_all_pairs(env, sets):
    """dedup_check.all_pairs (an inverted index over the n-grams) against the plain double loop over
    every pair, on the sample's first 250 documents and last 150 (near copies)."""
    sub = sets[:250] + sets[-150:]
    i, j, sims = dc.all_pairs(sub)
    got = {(int(a), int(b)): s for a, b, s in zip(i, j, sims)}
    want = {}
    for a in range(len(sub)):
        for b in range(a + 1, len(sub)):
            s = dc.jaccard(sub[a], sub[b])
            if s > 0:
                want[(a, b)] = s
    env.check(got == want, "all_pairs equals the double loop over every pair",
              f"{len(got)} vs {len(want)} pairs, first difference {next((k for k in want if got.get(k) != want[k]), None)}")


def main():
    env = dc.Env("dedup_real_text")
    path, corpus = sample(env)
    sets = dc.shingle_ids(corpus.docs)
    check_all_pairs(env, sets)
    i, j, sims = dc.all_pairs(sets)
    print(f"{len(i)} pairs share an n-gram; {int((sims >= 0.3).sum())} of them are at Jaccard >= 0.3")
    partners = np.bincount(np.concatenate([i[sims >= 0.2], j[sims >= 0.2]]), minlength=len(corpus.docs))
    isolated = (partners[i] == 1) & (partners[j] == 1) & (sims >= 0.2)
    found = []
    for seed in SEEDS:
        report = dc.dedup(env, f"work{seed}", [path], extra=["--threads", "2", "--seed", str(seed)])
        root = corpus.roots(report)
        found.append(root[i] == root[j])
        print(f"--seed {seed}: every pair (a third document may join a pair):")
        dc.compare_with_curve(sims, found[-1])
        check_low_pairs(env, corpus, root, i, j, sims)
    print("pairs of documents with no other partner >= 0.2, both runs:")
    dc.check_curve(env, "real text", np.tile(sims[isolated], len(SEEDS)), np.concatenate([f[isolated] for f in found]))
    env.finish()


main()
