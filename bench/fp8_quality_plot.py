#!/usr/bin/python3
"""Plots the metrics.jsonl files of bench/gpu/fp8_quality.sh (bf16 and fp8 runs of one seed and data
order, and optionally a second bf16 run) to a PNG: the training loss of each logged step and its
mean over 10 logged steps, the held-out loss when the runs evaluated one, and each run's relative
difference to the first bf16 run. Needs matplotlib (Debian's python3-matplotlib).

  fp8_quality_plot.py BF16.jsonl FP8.jsonl [BF16_REPEAT.jsonl] OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if len(sys.argv) not in (4, 5):
    sys.exit(__doc__)
paths, out = sys.argv[1:-1], sys.argv[-1]
names = ["bf16", "fp8", "bf16, second run"][: len(paths)]


def load(path):
    train, valid = {}, {}
    for r in map(json.loads, open(path)):
        if "loss" in r:
            train[r["step"]] = r["loss"]
        for k, v in r.items():
            if k.startswith("val/") and k.endswith("_loss"):
                valid[r["step"]] = v
    return train, valid


def windows(train, steps, n=10):
    groups = [steps[i:i + n] for i in range(0, len(steps) - n + 1, n)]
    return {g[-1]: sum(train[s] for s in g) / n for g in groups}


runs = [load(p) for p in paths]
steps = sorted(set.intersection(*(set(t) for t, _ in runs)))
vsteps = sorted(set.intersection(*(set(v) for _, v in runs)))
smooth = [windows(t, steps) for t, _ in runs]
panels = 3 if vsteps else 2
fig, axes = plt.subplots(panels, 1, figsize=(8, 3.2 * panels), sharex=True)
a = axes[0]
for (train, _), s, name in zip(runs, smooth, names):
    line, = a.plot(steps, [train[k] for k in steps], linewidth=0.5, alpha=0.35)
    a.plot(sorted(s), [s[k] for k in sorted(s)], color=line.get_color(), linewidth=1.5, label=name + " (mean of 10)")
a.set_ylabel("train loss"); a.legend(); a.grid(alpha=0.3)
if vsteps:
    b = axes[1]
    for (_, valid), name in zip(runs, names):
        b.plot(vsteps, [valid[k] for k in vsteps], ".-", linewidth=1, label=name)
    b.set_ylabel("held-out loss"); b.legend(); b.grid(alpha=0.3)
c = axes[-1]
base_train, base_valid = runs[0]
for (train, valid), s, name in list(zip(runs, smooth, names))[1:]:
    keys = sorted(s)
    c.plot(keys, [100 * (s[k] - smooth[0][k]) / smooth[0][k] for k in keys], linewidth=1, label=name + ", train (mean of 10)")
    if vsteps:
        c.plot(vsteps, [100 * (valid[k] - base_valid[k]) / base_valid[k] for k in vsteps], ".-", linewidth=1,
               label=name + ", held-out")
c.axhline(0, color="gray", linewidth=0.5)
for y in (-1, 1):
    c.axhline(y, color="gray", linewidth=0.5, linestyle=":")
c.set_ylabel("difference to bf16, %"); c.set_xlabel("step"); c.legend(fontsize=8); c.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(out, dpi=100)
print("wrote", out)
