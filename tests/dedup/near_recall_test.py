"""loom-dedup's near duplicates on planted copies at known Jaccard: real documents (botchan.txt and
wagahaiwa_nekodearu.txt tokenized by loom-tokenize with internlm_v7.model), one copy each made by
token substitutions, insertions, deletions or reordered lines (dedup_check.Planted), every pair's
exact 5-gram Jaccard computed here. With the defaults (14 bands of 8 rows), the fraction of pairs
found (the copy removed into its original's cluster) per Jaccard bucket, over 4 rounds of new copies
and loom-dedup --seed 1 to 4, must match the mean of 1 - (1 - s^8)^14 over the bucket's pairs within
3 standard deviations of the bucket's count, and must not match the curves of 7 or 9 rows. No original may be removed (they share at most a tenth of their
n-grams), and every copy removed must be matched to its own original.

usage: near_recall_test.py SOURCE_DIR LOOM_DEDUP LOOM_TOKENIZE TMP_PARENT
"""
import numpy as np

import dedup_check as dc

ROUNDS = 4  # independent rounds (new copies, loom's --seed 1..4): about 4,600 pairs


def one_round(env, k):
    """(Jaccard, found, kind) of every planted pair of round k."""
    p = dc.Planted(env, seed=10 + k)
    report = dc.dedup(env, f"work{k}", p.paths, extra=["--threads", "2", "--seed", str(k)])
    root = p.corpus.roots(report)
    removed = {p.corpus.index[(r["input"], r["index"])]: r for r in report}
    env.check(not any(d < len(p.orig) for d in removed), f"round {k}: no original is removed",
              str([removed[d] for d in removed if d < len(p.orig)][:3]))
    owner = {int(c): int(o) for o, c in zip(p.o, p.c)}
    wrong = [r for d, r in removed.items() if d in owner and root[d] != owner[d]]
    env.check(not wrong, f"round {k}: every copy removed is matched to its own original", str(wrong[:3]))
    env.check(all(r["reason"] == ("exact" if np.array_equal(p.corpus.docs[d], p.corpus.docs[owner[d]]) else "near")
                  for d, r in removed.items() if d in owner), f"round {k}: copies are reported as near (exact when equal)")
    return p.sims, root[p.c] == p.o, np.array(p.kind)


def main():
    env = dc.Env("dedup_near_recall")
    sims, found, kinds = map(np.concatenate, zip(*[one_round(env, k) for k in range(1, ROUNDS + 1)]))
    for kind in ("sub", "ins", "del", "reorder"):
        m = kinds == kind
        print(f"{kind}: {m.sum()} pairs, Jaccard {sims[m].min():.2f} to {sims[m].max():.2f}")
        dc.compare_with_curve(sims[m], found[m])
    print("all kinds:")
    dc.check_curve(env, "planted copies", sims, found)
    env.finish()


main()
