#!/usr/bin/python3
"""Plots the two metrics.jsonl of bench/gpu/fp8_quality.sh (bf16 and fp8 runs of one seed and data
order) to a PNG: both losses against the step, and fp8's relative difference to bf16. Needs Debian's
python3-matplotlib.

  fp8_quality_plot.py BF16.jsonl FP8.jsonl OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

runs = [{r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r} for p in sys.argv[1:3]]
steps = sorted(set(runs[0]) & set(runs[1]))
fig, (a, b) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
for run, name in zip(runs, ("bf16", "fp8")):
    a.plot(steps, [run[s] for s in steps], label=name, linewidth=1)
a.set_ylabel("train loss (one micro-batch per logged step)"); a.legend(); a.grid(alpha=0.3)
b.plot(steps, [100 * (runs[1][s] - runs[0][s]) / runs[0][s] for s in steps], ".-", linewidth=0.8)
b.axhline(0, color="gray", linewidth=0.5)
b.set_ylabel("fp8 - bf16, % of bf16"); b.set_xlabel("step"); b.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(sys.argv[3], dpi=100)
print("wrote", sys.argv[3])
