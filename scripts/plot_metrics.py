#!/usr/bin/python3
"""Plots loom-train's metrics.jsonl to a PNG: training loss (and each val/NAME_loss) and the
learning rate against the step. Needs Debian's python3-matplotlib.

  plot_metrics.py RUN_DIR/metrics.jsonl OUT.png

Exit codes as loom's tools: 0 written (or --help), 1 an unreadable metrics file, 2 usage.
"""
import json
import sys

USAGE = "usage: plot_metrics.py RUN_DIR/metrics.jsonl OUT.png   (loss, val/NAME_loss and lr against the step)"


def read_rows(src):
    rows = []
    with open(src) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{src}:{n}: not a JSON line ({e.msg})") from None
    return rows


def plot(rows, out):
    # Imported here: --help and a usage error need no matplotlib.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def main(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    if len(argv) != 2:
        print(USAGE, file=sys.stderr)
        return 2
    src, out = argv
    try:
        rows = read_rows(src)
    except OSError as e:
        print(f"plot_metrics.py: {src}: {e.strerror}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"plot_metrics.py: {e}", file=sys.stderr)
        return 1
    plot(rows, out)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
