#!/usr/bin/env python3
"""The InternLM-20B table of docs/DISTRIBUTED.md: per-rank memory of each ZeRO stage at several world
sizes on 80 and 141 GB GPUs (from `loom-train plan --json`, model.checkpoint=auto picking the
recompute), and per step the bytes each rank sends (as much is received) with the bandwidth that
hides them behind the step's compute, from a measured fwd+bwd time of one 20B layer.

Bytes per rank and step (ring collectives: each rank sends (W-1)/W of the buffer), P parameters,
M = data.micro_num:
  replicated  all-reduce of the bf16 gradients once:            2 * 2P
  stage 1     reduce-scatter fp32 once, all-gather bf16 once:    4P + 2P
  stage 2     reduce-scatter fp32 per micro-batch, all-gather:   4P*M + 2P
  stage 3     all-gather bf16 twice per micro-batch (forward and backward), reduce-scatter fp32: 8P*M

usage: zero_table.py LOOM_TRAIN LAYER_FWD_BWD_SECONDS [--config configs/internlm_20b.ini] [--worlds 8,16,64]
"""
import argparse
import json
import subprocess


def plan(binary, config, world, stage, gib):
    zero = ["--parallel.zero1=1"] if stage == 0 else ["--parallel.zero1=-1", f"--parallel.zero_stage={stage}"]
    out = subprocess.run([binary, "plan", "--config", config, "--world-size", str(world), "--device-memory-gib",
                          str(gib), "--json", "--job.device=cuda", "--model.checkpoint=auto"] + zero,
                         check=False, capture_output=True, text=True).stdout  # exit 1: does not fit
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loom_train")
    ap.add_argument("layer_seconds", type=float, help="fwd+bwd of one layer, one micro-batch (measured)")
    ap.add_argument("--config", default="configs/internlm_20b.ini")
    ap.add_argument("--worlds", default="8,16,64", help="world sizes, comma-separated")
    a = ap.parse_args()
    names = {0: "replicated", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}
    print("| W | mode | per rank, 80 GB | fits 80 GB (recompute) | per rank, 141 GB | fits 141 GB (recompute) |"
          " sent per step | bandwidth to hide it |")
    print("|---|---|---|---|---|---|---|---|")
    for world in map(int, a.worlds.split(",")):
        for stage in (0, 1, 2, 3):
            p80, p141 = plan(a.loom_train, a.config, world, stage, 80 * 1e9 / 2**30), \
                plan(a.loom_train, a.config, world, stage, 141 * 1e9 / 2**30)
            P = p80["num_parameters"]
            layers = 60
            M = 4  # configs/internlm_20b.ini's data.micro_num
            f = (world - 1) / world
            sent = f * {0: 4 * P, 1: 6 * P, 2: (4 * M + 2) * P, 3: 8 * P * M}[stage]
            compute = a.layer_seconds * layers * M
            cell = lambda p: f"{p['per_rank_bytes']['total'] / 1e9:.1f} GB"
            fit = lambda p: (f"yes ({p['checkpoint_fraction']:.2g})" if p["fits"] else "no")
            print(f"| {world} | {names[stage]} | {cell(p80)} | {fit(p80)} | {cell(p141)} | {fit(p141)} | "
                  f"{sent / 1e9:.0f} GB | {sent / compute / 1e9:.0f} GB/s |")
    print(f"\ncompute per step: {a.layer_seconds * 1e3:.1f} ms per layer and micro-batch x 60 layers x 4 micro-batches"
          f" = {a.layer_seconds * 60 * 4:.2f} s")


if __name__ == "__main__":
    main()
