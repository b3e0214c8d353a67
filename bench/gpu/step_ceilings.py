#!/usr/bin/env python3
"""The measured ceiling of each part of a training step (GEMM, attention, everything else), beside
what loom's step spends on it: what an MFU target needs and which part must give it.

For a preset of bench/gpu/run.sh (bf16, one micro-batch of MICRO_BSZ packs of SEQ_LEN tokens):
- GEMM ceiling: every matmul of one step at loom's shapes (fused QKV [(H+2K)D, C], attention output
  [C, HD], w1 and w2 as one [2F, C], w3 [C, F] per layer; the head [V, C]), each as its forward
  (Y = X W^T) and its two backward GEMMs (dX = dY W, dW = dY^T X), run alone through cuBLAS
  (torch.matmul, bf16, fp32 accumulation), median of ITERS timed by CUDA events.
- attention ceiling: the fastest causal kernel LibTorch ships for [B, H, T, D] (cuDNN's fused SDPA,
  and FlashAttention-2 beside it), forward + backward, per layer x L; its TFLOP/s count causal
  attention as loom's executed FLOPs do (forward x 3).
- memory bandwidth: a device-to-device copy of 2 GiB (what the elementwise work, the norms and
  AdamW can reach at best).
- loom's side (optional): the per-category GPU time of a profiled step (bench/gpu/trace_summary.py's
  text, --summary) and the step's wall seconds of an unprofiled run (--step-s). "Everything else" is
  the step's wall time less loom's GEMM and attention time: norms, rotary, SwiGLU, the loss, copies,
  AdamW where it does not overlap, and idle time.

FLOP convention (docs/GPU.md): model FLOPs per step = (6 N + 12 L C T) x tokens, N = matmul
parameters (the head included); MFU = model FLOPs / (wall x 989 TFLOP/s). Attention's executed
FLOPs (causal: half the square) are what its TFLOP/s figure counts.

Prints markdown: the kernels' figures, then per part loom / ceiling, and the MFU the step would reach
with GEMM and attention at their ceilings and everything else as measured, and with nothing else.
usage: step_ceilings.py --preset 1b|7b [--micro-bsz N] [--seq-len T] [--summary TRACE.txt] [--step-s S]
"""
import argparse
import re
import statistics

import torch

PRESETS = {  # hidden C, layers L, heads H (kv heads = H), head dim D, vocab V, mlp_ratio as loom's default
    "1b": dict(C=2048, L=24, H=16),
    "7b": dict(C=4096, L=32, H=32),
}
PEAK = 989e12
VOCAB = 103168
MLP_RATIO = 8 / 3


def ffn_hidden(c):
    raw = int(c * MLP_RATIO)
    return 256 * ((raw + 255) // 256)


def timed(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def gemm_ceiling(tok, c, f, h, k, d, layers, vocab, iters):
    """(seconds per step, FLOPs, rows) of every linear's three GEMMs at loom's shapes."""
    dev, dt = "cuda", torch.bfloat16
    linears = [  # (name, in, out, count)
        ("qkv", c, (h + 2 * k) * d, layers),
        ("attention out", h * d, c, layers),
        ("w1+w2", c, 2 * f, layers),
        ("w3", f, c, layers),
        ("head", c, vocab, 1),
    ]
    rows, total_s, total_flops = [], 0.0, 0
    for name, i, o, n in linears:
        x = torch.randn(tok, i, device=dev, dtype=dt)
        w = torch.randn(o, i, device=dev, dtype=dt) * i ** -0.5
        dy = torch.randn(tok, o, device=dev, dtype=dt)
        fwd = timed(lambda: torch.matmul(x, w.t()), iters)
        dx = timed(lambda: torch.matmul(dy, w), iters)
        dw = timed(lambda: torch.matmul(dy.t(), x), iters)
        flops = 3 * 2 * tok * i * o
        s = fwd + dx + dw
        rows.append((name, f"[{tok}, {i}] x [{i}, {o}]", n, s, flops / s))
        total_s += n * s
        total_flops += n * flops
        del x, w, dy
    return total_s, total_flops, rows


def attention_ceiling(b, h, t, d, layers, iters):
    """{kernel: seconds per step (forward + backward, x layers)} and the executed FLOPs per layer."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(b, h, t, d, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(b, h, t, d, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(b, h, t, d, device=dev, dtype=dt, requires_grad=True)
    g = torch.randn(b, h, t, d, device=dev, dtype=dt)
    out = {}
    for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("FlashAttention-2", SDPBackend.FLASH_ATTENTION)):
        def step():  # the gradients as returned, not accumulated into q.grad etc. (that would be timed too)
            with sdpa_kernel(backend):
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(y, (q, k, v), g)
        try:
            out[name] = layers * timed(step, iters)
        except RuntimeError as e:
            print(f"- {name}: not run ({str(e).splitlines()[0]})")
    # Causal: t (t + 1) / 2 query-key pairs, 2 matmuls x 2 FLOPs x d each, x 3 with the backward:
    # loom's executed_flops convention (trainer/model/flops.cpp); the backward's recomputation of
    # the scores (FlashAttention-style kernels run ~3.5x the forward) is not counted.
    flops = 3 * 2 * 2 * b * h * d * t * (t + 1) // 2
    return out, flops


def bandwidth(iters):
    n = 1 << 30  # bf16 elements: 2 GiB
    a = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    s = timed(lambda: b.copy_(a), iters)
    return 2 * a.numel() * a.element_size() / s  # read + write


def loom_parts(path):
    """{category: ms per step} from trace_summary.py's "GPU time by category" table."""
    parts, on = {}, False
    for line in open(path, errors="replace"):
        if line.startswith("== GPU time by category"):
            on = True
            continue
        if on:
            m = re.match(r"\s+(\S+)\s+([\d.]+) ms\s", line)
            if not m:
                break
            parts[m.group(1)] = float(m.group(2))
    return parts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=PRESETS, required=True)
    ap.add_argument("--micro-bsz", type=int, default=None, help="default: 4 for 1b, 1 for 7b")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--summary", help="trace_summary.py's output for a profiled step of the same shape")
    ap.add_argument("--step-s", type=float, help="wall seconds per step of an unprofiled run (loom_train.sh step_s)")
    ap.add_argument("--recompute-layers", type=int, default=0, help="layers whose forward the step runs twice")
    a = ap.parse_args()
    p = PRESETS[a.preset]
    c, layers, h = p["C"], p["L"], p["H"]
    d, f = c // h, ffn_hidden(c)
    bsz = a.micro_bsz or (4 if a.preset == "1b" else 1)
    tok = bsz * a.seq_len
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"### Ceilings of a {a.preset} step ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()})\n")
    print(f"Shape: C {c}, L {layers}, H {h} (kv {h}), D {d}, F {f}, V {VOCAB}; micro_bsz {bsz} x seq_len {a.seq_len} "
          f"= {tok} tokens a step; bf16; median of {a.iters} timed calls each.\n")

    gemm_s, gemm_flops, rows = gemm_ceiling(tok, c, f, h, h, d, layers, VOCAB, a.iters)
    print("| linear | GEMM (forward) | per step | ms (fwd + 2 bwd) | TFLOP/s |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, shape, n, s, rate in rows:
        print(f"| {name} | {shape} | {n} | {s * 1e3:.3f} | {rate / 1e12:.0f} |")
    print(f"| all | | | {gemm_s * 1e3:.2f} | {gemm_flops / gemm_s / 1e12:.0f} ({100 * gemm_flops / gemm_s / PEAK:.1f}% of peak) |\n")

    attn, attn_flops = attention_ceiling(bsz, h, a.seq_len, d, layers, a.iters)
    for name, s in attn.items():
        print(f"- attention, {name}: {s * 1e3:.2f} ms a step (x{layers} layers, forward + backward), "
              f"{layers * attn_flops / s / 1e12:.0f} TFLOP/s executed (causal)")
    bw = bandwidth(a.iters)
    print(f"- device-to-device copy of 2 GiB: {bw / 1e12:.2f} TB/s (read + write)\n")

    n_params = layers * (c * (h + 2 * h) * d + h * d * c + 3 * c * f) + c * VOCAB
    model_flops = (6 * n_params + 12 * layers * c * a.seq_len) * tok
    attn_best = min(attn.values()) if attn else float("nan")
    # Recomputed layers run their forward twice: a third more of their GEMM and attention forward.
    extra = a.recompute_layers / layers / 3 if a.recompute_layers else 0.0
    gemm_ceil, attn_ceil = gemm_s * (1 + extra), attn_best * (1 + extra)
    print(f"Model FLOPs a step (6N + 12LCT, N = {n_params / 1e9:.3f} B matmul parameters): {model_flops / 1e12:.1f} TFLOP; "
          f"at 100% MFU {model_flops / PEAK * 1e3:.1f} ms.")
    print(f"- GEMM and attention alone at their ceilings: {(gemm_ceil + attn_ceil) * 1e3:.1f} ms, "
          f"MFU {100 * model_flops / (gemm_ceil + attn_ceil) / PEAK:.1f}% (the bound with nothing else in the step)")
    if a.summary and a.step_s:
        parts = loom_parts(a.summary)
        lg, la = parts.get("gemm", 0.0) / 1e3, parts.get("attention", 0.0) / 1e3
        rest = a.step_s - lg - la
        print(f"\n| part | loom ms a step | ceiling ms | loom / ceiling |")
        print("| --- | ---: | ---: | ---: |")
        print(f"| GEMM | {lg * 1e3:.1f} | {gemm_ceil * 1e3:.1f} | {lg / gemm_ceil:.3f} |")
        print(f"| attention | {la * 1e3:.1f} | {attn_ceil * 1e3:.1f} | {la / attn_ceil:.3f} |")
        print(f"| everything else (wall - GEMM - attention) | {rest * 1e3:.1f} | - | - |")
        print(f"| step (wall, unprofiled) | {a.step_s * 1e3:.1f} | {(gemm_ceil + attn_ceil + rest) * 1e3:.1f} | "
              f"{a.step_s / (gemm_ceil + attn_ceil + rest):.3f} |\n")
        others = ", ".join(f"{k} {v:.1f}" for k, v in parts.items() if k not in ("gemm", "attention"))
        print(f"- loom's other GPU time by category, ms a step (all streams, AdamW's side stream included): {others}")
        print(f"- MFU now {100 * model_flops / a.step_s / PEAK:.1f}%; with GEMM and attention at their ceilings and "
              f"everything else as now: {100 * model_flops / (gemm_ceil + attn_ceil + rest) / PEAK:.1f}%")
        for goal in (0.60, 0.64):
            budget = model_flops / (goal * PEAK) - gemm_ceil - attn_ceil
            print(f"- {goal:.0%} MFU needs a step of {model_flops / (goal * PEAK) * 1e3:.1f} ms: with GEMM and attention "
                  f"at their ceilings, {budget * 1e3:.1f} ms for everything else (now {rest * 1e3:.1f})")


if __name__ == "__main__":
    main()
