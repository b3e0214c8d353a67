"""loom-dedup --verify=true --threshold 0.7 against exact Jaccard computed here: the planted copies of
dedup_check.Planted (one near copy of each real document, Jaccard 0.42 to 1) and chains of copies
(each link a copy of the one before at Jaccard about 0.8, so the chain's ends are below 0.7).

- The report's `jaccard` of every removed document equals the Jaccard of its 5-gram set with its
  matched document's, as computed here (to 1e-12).
- No planted copy below 0.7 is removed; every one removed has Jaccard >= 0.7 with its matched
  document (its original); those at 0.7 and above are found as often as 1 - (1 - s^8)^14 says (per
  bucket, 3 standard deviations).
- Every cluster is connected by pairs of exact Jaccard >= 0.7 (no pair below the threshold joins
  two documents); in a chain a removed document may be matched to a kept one below 0.7 through the
  links between them (clusters are transitive, docs/DEDUP.md): counted and reported.

usage: verify_test.py SOURCE_DIR LOOM_DEDUP LOOM_TOKENIZE TMP_PARENT
"""
import random

import dedup_check as dc

THRESHOLD, CHAINS, CHAIN_LINKS = 0.7, 30, 4


def chains(p):
    """CHAINS chains of CHAIN_LINKS copies, from originals that are not in p."""
    rng = random.Random(3)
    pool = [int(t) for d in p.orig for t in d[1:-1]]
    starts = [d for d in p.orig if len(d) >= 150][:CHAINS]  # copied again: a second, separate family
    docs = []
    for d in starts:
        link = [int(t) + 1 if 2 < t < 100000 else int(t) for t in d]  # new tokens: no n-gram shared with d
        docs.append(link)
        for _ in range(CHAIN_LINKS):
            link = dc.edit_copy(rng, link, "sub", 0.8, pool)
            docs.append(link)
    return docs


def connected_by_strong_pairs(members, sets):
    """Whether the members are one component under pairs of Jaccard >= THRESHOLD."""
    seen, todo = {members[0]}, [members[0]]
    while todo:
        a = todo.pop()
        for b in members:
            if b not in seen and dc.jaccard(sets[a], sets[b]) >= THRESHOLD:
                seen.add(b)
                todo.append(b)
    return len(seen) == len(members)


def main():
    env = dc.Env("dedup_verify")
    p = dc.Planted(env, seed=21)
    chain_docs = chains(p)
    chain_path = env.path("in/chains.bin")
    dc.write_shard(chain_path, chain_docs, p.head)
    p.corpus.add(chain_path, chain_docs)
    sets = dc.shingle_ids(p.corpus.docs)
    report = dc.dedup(env, "work", p.paths + [chain_path], extra=["--verify=true", "--threshold", str(THRESHOLD)])
    root = p.corpus.roots(report)
    n_planted = 2 * len(p.orig)
    below, differ = 0, []
    for r in report:
        k = p.corpus.index[(r["input"], r["index"])]
        m = p.corpus.index[(r["matched_input"], r["matched_index"])]
        j = dc.jaccard(sets[k], sets[m])
        if "jaccard" not in r or abs(r["jaccard"] - j) > 1e-12:  # absent: not verified
            differ.append((r, j))
        if j < THRESHOLD:
            below += 1
            env.check(k >= n_planted, f"planted copy {p.corpus.where[k]} removed at Jaccard {j} < {THRESHOLD}")
    env.check(not differ, "the report's jaccard is the exact Jaccard computed here", str(differ[:3]))
    print(f"{len(report)} removed; {len(report) - len(differ)} report values equal to 1e-12; {below} matched "
          f"below {THRESHOLD} (allowed in chains only, through their links)")
    env.check(below > 0, "a chain gives a removed document matched below the threshold through its links")
    clusters = {}
    for d, r in enumerate(root):
        clusters.setdefault(int(r), []).append(d)
    broken = [m for m in clusters.values() if len(m) > 1 and not connected_by_strong_pairs(m, sets)]
    print(f"{sum(len(m) > 1 for m in clusters.values())} clusters of two or more, "
          f"{len(broken)} not connected by pairs >= {THRESHOLD}")
    env.check(not broken, f"every cluster is connected by pairs of Jaccard >= {THRESHOLD}",
              str([[p.corpus.where[d] for d in m] for m in broken[:2]]))
    found = root[p.c] == p.o
    low = p.sims < THRESHOLD
    print(f"planted pairs below {THRESHOLD}: {int(low.sum())}, found {int(found[low].sum())}")
    env.check(not found[low].any(), f"no planted pair below {THRESHOLD} is found")
    bad = dc.compare_with_curve(p.sims[~low], found[~low], buckets=[(0.7, 0.8), (0.8, 0.9), (0.9, 1.0000001)])
    env.check(not bad, f"planted pairs >= {THRESHOLD} found as the LSH curve says", str(bad))
    env.finish()


main()
