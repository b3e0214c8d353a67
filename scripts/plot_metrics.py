#!/usr/bin/python3
"""Plots loom-train's metrics.jsonl to a PNG: training loss (and each val/NAME_loss) and the
learning rate against the step. Needs Debian's python3-matplotlib.

  plot_metrics.py RUN_DIR/metrics.jsonl OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src, out = sys.argv[1], sys.argv[2]
rows = [json.loads(line) for line in open(src) if line.strip()]
train = [r for r in rows if "loss" in r]
val = {}
for r in rows:
    for k, v in r.items():
        if k.startswith("val/") and k.endswith("_loss"):
            val.setdefault(k, []).append((r["step"], v))
fig, (a, b) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
a.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
for k, pts in sorted(val.items()):
    a.plot([s for s, _ in pts], [v for _, v in pts], "o-", label=k)
a.set_ylabel("loss"); a.legend(); a.grid(alpha=0.3)
b.plot([r["step"] for r in train], [r["lr"] for r in train])
b.set_ylabel("lr"); b.set_xlabel("step"); b.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(out, dpi=100)
print("wrote", out)
