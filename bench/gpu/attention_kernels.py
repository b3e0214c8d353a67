#!/usr/bin/env python3
"""Varlen causal attention over packed documents, forward + backward, on the kernels this torch
ships: FlashAttention-2 (aten::_flash_attention_forward/_backward, what loom runs today) against
cuDNN's SDPA (aten::_cudnn_attention_forward/_backward with cumulative sequence lengths).

Each case draws documents the way bench/gpu/make_packed.py does (lengths log-uniform in
[64, 4 * seq_len], cut at pack ends), so the segment count changes from call to call as in training.
cuDNN builds a graph per shape key; the 'fixed' variant pads cu_seqlens with empty segments to a fixed
count and passes max_seqlen = seq_len, so one graph serves every call. '_packs' variants run one causal
sequence per pack on both kernels (the kernels' speed without segments); 'cudnn_forward_only' the
forward alone; 'cudnn_docmask' cuDNN's dense entry on one causal sequence per pack with the documents
kept apart by an additive [packs, 1, S, S] bf16 bias (-inf across documents, '_finite': -1e4), whose
rows also report the bias's own build time and the peak memory; 'cudnn_segments' the dense entry
once per document on padded views of the packed rows (what trainer/kernels/cudnn_attention.h did
before it built its own graphs, here on one stream; '_s256'/'_s512': shorter documents through FlashAttention-2; '_g64': padded to
64 rather than 128), whose rows also report the time to build every padded length's graphs. Prints
one JSON line per (case, kernel), each run in a process of its own: milliseconds per call (host
included, synchronised), the device's own milliseconds (profiler), TFLOP/s of the causal attention
done, and the largest difference from FlashAttention-2 on the same segments in the output and the
three gradients.

Usage: attention_kernels.py [--iters 30] [--cases 1b,7b] [--kernels flash2,hybrid_fixed]
"""
import argparse
import json
import math
import subprocess
import sys
import time

import numpy as np
import torch

aten = torch.ops.aten


def cu_seqlens(rng, packs, seq_len):
    cuts = [0]
    left = 0
    for _ in range(packs):
        start = 0
        while start < seq_len:
            if left == 0:
                left = int(np.exp(rng.uniform(np.log(64), np.log(4 * seq_len))))
            n = min(seq_len - start, left)
            start += n
            left -= n
            cuts.append(cuts[-1] + n)
        # a document continuing into the next pack starts a new segment there
    return cuts


def flash(q, k, v, cu, max_len, scale, g):
    out, lse, seed, off, _ = aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, True, False,
                                                           scale=scale)
    dq, dk, dv = aten._flash_attention_backward(g, q, k, v, out, lse, cu, cu, max_len, max_len, 0.0, True, seed,
                                                off, scale=scale)
    return out, dq, dk, dv


def cudnn(q, k, v, cu, max_len, scale, g, backward=True):
    r = aten._cudnn_attention_forward(q, k, v, None, cu, cu, max_len, max_len, True, 0.0, True, False, scale=scale)
    out, lse, seed, off = r[0], r[1], r[6], r[7]
    if not backward:
        return out, None, None, None
    dq, dk, dv = aten._cudnn_attention_backward(g, q, k, v, out, lse, seed, off, None, cu, cu, max_len, max_len,
                                                0.0, True, scale=scale)
    return out, dq, dk, dv


def cudnn_forward(*args):
    return cudnn(*args, backward=False)


def lse_layouts(h, hk, d, dev):
    """The log-sum-exp shapes and strides each kernel returns for one 64-token segment."""
    z = lambda heads: torch.zeros(64, heads, d, device=dev, dtype=torch.bfloat16)
    cu = torch.tensor([0, 64], dtype=torch.int32, device=dev)
    f = aten._flash_attention_forward(z(h), z(hk), z(hk), cu, cu, 64, 64, 0.0, True, False)[1]
    c = aten._cudnn_attention_forward(z(h), z(hk), z(hk), None, cu, cu, 64, 64, True, 0.0, True, False)[1]
    return dict(flash2=[list(f.shape), list(f.stride())], cudnn=[list(c.shape), list(c.stride())])


def hybrid(q, k, v, cu, max_len, scale, g, flash_cu=None, flash_max=None):
    """cuDNN's forward, FlashAttention-2's backward from cuDNN's output and log-sum-exp (the same
    quantity; cuDNN keeps it per token and head, FlashAttention-2 per head and token)."""
    r = aten._cudnn_attention_forward(q, k, v, None, cu, cu, max_len, max_len, True, 0.0, True, False, scale=scale)
    out, lse = r[0], r[1]
    lse = lse.reshape(q.size(0), q.size(1)).t().contiguous() if lse.size(0) == q.size(0) else lse.reshape(q.size(1), -1)
    fcu = cu if flash_cu is None else flash_cu
    fmax = max_len if flash_max is None else flash_max
    empty = torch.empty(2, dtype=torch.int64, device=q.device)
    dq, dk, dv = aten._flash_attention_backward(g, q, k, v, out, lse, fcu, fcu, fmax, fmax, 0.0, True, empty, empty,
                                                scale=scale)
    return out, dq, dk, dv


def cudnn_dense(q, k, v, cu, max_len, scale, g, bias=None):
    """One causal sequence per pack ([B, H, S, D] views of the packed rows): the kernel's speed
    without the segment machinery, set beside flash2_packs (the same attention). bias: an additive
    [B, 1, S, S] mask, broadcast over the heads."""
    b = q.size(0) // max_len
    view = lambda t: t.view(b, max_len, t.size(1), t.size(2)).transpose(1, 2)
    qd, kd, vd, gd = view(q), view(k), view(v), view(g)
    if bias is not None:
        bias = bias.expand(b, q.size(1), max_len, max_len)
    r = aten._cudnn_attention_forward(qd, kd, vd, bias, None, None, max_len, max_len, True, 0.0, True, False,
                                      scale=scale)
    out, lse, seed, off = r[0], r[1], r[6], r[7]
    dq, dk, dv = aten._cudnn_attention_backward(gd, qd, kd, vd, out, lse, seed, off, bias, None, None,
                                                max_len, max_len, 0.0, True, scale=scale)
    back = lambda t: t.transpose(1, 2).reshape(q.size(0), t.size(1), t.size(3))
    return back(out), back(dq), back(dk), back(dv)


def doc_bias(cu, packs, seq_len, dev, masked=float("-inf")):
    """[packs, 1, S, S] bf16: 0 where query and key lie in one document, `masked` elsewhere; the
    heads share it (stride 0), so one copy per pack serves every head and layer of a step."""
    starts = torch.zeros(packs * seq_len, dtype=torch.int32, device=dev)
    starts[torch.tensor(cu[:-1], dtype=torch.int64, device=dev)] = 1
    doc = torch.cumsum(starts, 0).view(packs, seq_len)
    same = doc[:, :, None] == doc[:, None, :]
    zero = torch.zeros((), dtype=torch.bfloat16, device=dev)
    return torch.where(same, zero, torch.tensor(masked, dtype=torch.bfloat16, device=dev)).unsqueeze(1)


def segment_plan(cu, grain, small):
    """Per-segment host plan for cudnn_segments: (start, length, padded length) of each segment of
    `small` tokens or more, and the cu_seqlens of the shorter ones gathered end to end."""
    big, short_rows, short_cu = [], [], [0]
    for a, b in zip(cu[:-1], cu[1:]):
        if b - a >= small:
            big.append((a, b - a, -(-(b - a) // grain) * grain))
        else:
            short_rows.extend(range(a, b))
            short_cu.append(short_cu[-1] + b - a)
    return big, short_rows, short_cu


def cudnn_segments(q, k, v, plan, max_len, scale, g):
    """cuDNN's dense causal entry once per document, on [1, H, P, D] views of the packed rows with no
    copy: P rounds the length up to a multiple of the grain, so a handful of shapes (cached graphs)
    serve every step. The rows past the document belong to the next one; causality keeps them out of
    the document's own outputs, their outputs are dropped, and in the backward their output gradient
    is zero, so they add nothing to the document's key and value gradients. Documents shorter than
    `small` go to FlashAttention-2 varlen in one call, gathered end to end."""
    big, short_rows, short_cu, short_max = plan
    out = torch.empty_like(q)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # as_strided, not slicing: the last document's view runs past the tensor into the slack rows
    view = lambda t, a, p: t.as_strided((p,) + t.shape[1:], t.stride(), t.storage_offset() + a * t.stride(0)) \
        .unsqueeze(0).transpose(1, 2)
    saved = []
    for a, n, p in big:
        r = aten._cudnn_attention_forward(view(q, a, p), view(k, a, p), view(v, a, p), None, None, None, p, p,
                                          True, 0.0, True, False, scale=scale)
        out[a:a + n] = r[0][0, :, :n].transpose(0, 1)
        saved.append(r)
    if short_rows is not None:
        idx = short_rows
        sq, sk, sv, sg = q[idx], k[idx], v[idx], g[idx]
        so, sdq, sdk, sdv = flash(sq, sk, sv, short_cu, short_max, scale, sg)
        out[idx], dq[idx], dk[idx], dv[idx] = so, sdq, sdk, sdv
    for (a, n, p), r in zip(big, saved):
        gp = torch.zeros((p, q.size(1), q.size(2)), device=q.device, dtype=q.dtype)
        gp[:n] = g[a:a + n]
        gd = gp.unsqueeze(0).transpose(1, 2)
        rq, rk, rv = aten._cudnn_attention_backward(gd, view(q, a, p), view(k, a, p), view(v, a, p), r[0], r[1],
                                                    r[6], r[7], None, None, None, p, p, 0.0, True, scale=scale)
        dq[a:a + n] = rq[0, :, :n].transpose(0, 1)
        dk[a:a + n] = rk[0, :, :n].transpose(0, 1)
        dv[a:a + n] = rv[0, :, :n].transpose(0, 1)
    return out, dq, dk, dv


def cudnn_docmask(q, k, v, bias, max_len, scale, g):
    """cuDNN's dense (cached-graph) entry on one causal sequence per pack, with the documents
    kept apart by an additive bias: per-document attention at the cost of the cross-document
    tiles below the diagonal (computed, then masked)."""
    return cudnn_dense(q, k, v, None, max_len, scale, g, bias=bias)


KERNELS = {"flash2": (flash, "docs"), "cudnn": (cudnn, "docs"), "cudnn_fixed": (cudnn, "docs_padded"),
           "cudnn_forward_only": (cudnn_forward, "docs"), "cudnn_fixed_forward_only": (cudnn_forward, "docs_padded"),
           "hybrid_fixed": (hybrid, "docs_padded"), "flash2_packs": (flash, "packs"),
           "cudnn_packs": (cudnn_dense, "packs"), "cudnn_docmask": (cudnn_docmask, "docs_bias"),
           "cudnn_docmask_finite": (cudnn_docmask, "docs_bias_finite"),
           "cudnn_segments": (cudnn_segments, "docs_segments_1"), "cudnn_segments_s256": (cudnn_segments, "docs_segments_256"),
           "cudnn_segments_s512": (cudnn_segments, "docs_segments_512"),
           "cudnn_segments_g64": (cudnn_segments, "docs_segments_1_64")}
GRAIN = 128
CASES = {"1b": (4, 4096, 16, 16, 128), "7b": (1, 4096, 32, 32, 128), "gqa": (2, 4096, 32, 8, 128)}


def run(case, kernel, iters):
    packs, seq_len, h, hk, d = CASES[case]
    fn, segs = KERNELS[kernel]
    dev = torch.device("cuda")
    rng = np.random.default_rng(0)
    tok = packs * seq_len
    if segs == "packs":
        cus = [list(range(0, tok + 1, seq_len))] * iters
    else:
        cus = [cu_seqlens(rng, packs, seq_len) for _ in range(iters)]
    most = max(len(c) for c in cus) - 1
    fixed_count = 1 << math.ceil(math.log2(max(most, 1) * 2))
    pad = segs == "docs_padded"
    gen = torch.Generator(device=dev).manual_seed(0)
    slack = 128  # rows past the last token: the last document's padded view reads into them
    q = torch.randn(tok + slack, h, d, device=dev, dtype=torch.bfloat16, generator=gen)[:tok]
    k = torch.randn(tok + slack, hk, d, device=dev, dtype=torch.bfloat16, generator=gen)[:tok]
    v = torch.randn(tok + slack, hk, d, device=dev, dtype=torch.bfloat16, generator=gen)[:tok]
    g = torch.randn(tok, h, d, device=dev, dtype=torch.bfloat16, generator=gen)
    scale = 1 / math.sqrt(d)
    # causal FLOPs of the segments (forward 2 matmuls, backward 5; half the square), for TFLOP/s
    per_pass = 2 if fn is cudnn_forward else 7
    flops = [sum((c[i + 1] - c[i]) ** 2 for i in range(len(c) - 1)) * h * d * 2 * per_pass / 2 for c in cus]

    def inputs(c):
        if segs.startswith("docs_segments"):
            parts = segs.split("_")
            small, grain = int(parts[2]), int(parts[3]) if len(parts) > 3 else GRAIN
            big, rows, scu = segment_plan(c, grain, small)
            if rows:
                plan = (big, torch.tensor(rows, device=dev), torch.tensor(scu, dtype=torch.int32, device=dev),
                        max(scu[i + 1] - scu[i] for i in range(len(scu) - 1)))
            else:
                plan = (big, None, None, 0)
            return plan, seq_len, None
        if segs.startswith("docs_bias"):
            masked = -1e4 if segs.endswith("finite") else float("-inf")
            return doc_bias(c, packs, seq_len, dev, masked), seq_len, None
        lens = c + [c[-1]] * (fixed_count + 1 - len(c)) if pad else c
        t = torch.tensor(lens, dtype=torch.int32, device=dev)
        real = torch.tensor(c, dtype=torch.int32, device=dev)
        return t, (seq_len if pad else max(c[i + 1] - c[i] for i in range(len(c) - 1))), real

    def call(f, q, k, v, cu, max_len, real, scale, g):
        if f is hybrid:  # FlashAttention-2's backward takes the segments without the padding
            return f(q, k, v, cu, max_len, scale, g, flash_cu=real, flash_max=seq_len)
        return f(q, k, v, cu, max_len, scale, g)

    row = dict(case=case, kernel=kernel, tokens=tok, heads=h, kv_heads=hk, head_dim=d, segments_max=most,
               padded_to=fixed_count if pad else None)
    try:
        if fn is hybrid:
            row["lse_layouts"] = lse_layouts(h, hk, d, dev)
        first = torch.tensor(cus[0], dtype=torch.int32, device=dev)
        ref = flash(q, k, v, first, max(cus[0][i + 1] - cus[0][i] for i in range(len(cus[0]) - 1)), scale, g)
        got = call(fn, q, k, v, *inputs(cus[0]), scale, g)
        torch.cuda.synchronize()
        row["max_diff"] = {n: float((x.float() - y.float()).abs().max()) for n, x, y in
                           zip(("out", "dq", "dk", "dv"), got, ref) if x is not None}
        if segs.startswith("docs_segments"):  # build every padded length's graphs once, timed apart
            grain = int(segs.split("_")[3]) if len(segs.split("_")) > 3 else GRAIN
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for p in range(grain, seq_len + 1, grain):
                fn(q, k, v, ([(0, p, p)], None, None, 0), seq_len, scale, g)
            torch.cuda.synchronize()
            row["graphs_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
            row["segments_mean"] = round(sum(len(c) - 1 for c in cus) / len(cus), 1)
        prepared = [inputs(c) for c in cus]  # host-to-device copies outside the timing
        for args in prepared[:3]:  # warm-up
            call(fn, q, k, v, *args, scale, g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for args in prepared:
            call(fn, q, k, v, *args, scale, g)
        torch.cuda.synchronize()
        secs = (time.perf_counter() - t0) / len(cus)
        row["ms"] = round(secs * 1e3, 3)
        row["tflops"] = round(sum(flops) / len(flops) / secs / 1e12, 1)
        row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        # The device's own time (kernels, copies and memsets), apart from the host's: a kernel
        # called once per document may be bound by the host in Python and not in loom's C++.
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for args in prepared:
                call(fn, q, k, v, *args, scale, g)
            torch.cuda.synchronize()
        busy = sum(e.self_device_time_total for e in prof.key_averages())  # microseconds
        row["gpu_ms"] = round(busy / 1e3 / len(cus), 3)
        if segs.startswith("docs_bias"):  # the mask's own cost, once per step in training
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for c in cus:
                doc_bias(c, packs, seq_len, dev)
            torch.cuda.synchronize()
            row["bias_ms"] = round((time.perf_counter() - t0) / len(cus) * 1e3, 3)
    except Exception as e:  # noqa: BLE001 - the probe reports what this build lacks
        row["error"] = str(e).splitlines()[0][:300]
    print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, of " + ",".join(CASES))
    ap.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated, of " + ",".join(KERNELS))
    ap.add_argument("--one", nargs=2, metavar=("CASE", "KERNEL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        return run(*a.one, a.iters)
    print(json.dumps(dict(torch=torch.__version__, cudnn=torch.backends.cudnn.version(),
                          device=torch.cuda.get_device_name())))
    for name in ("_cudnn_attention_forward", "_cudnn_attention_backward"):
        print(f"# {getattr(aten, name).default._schema}")
    # One process per variant: a kernel that faults leaves the context unusable.
    for case in a.cases.split(","):
        for kernel in a.kernels.split(","):
            try:
                r = subprocess.run([sys.executable, __file__, "--iters", str(a.iters), "--one", case, kernel],
                                   capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                print(json.dumps(dict(case=case, kernel=kernel, error="no result in 300 s")), flush=True)
                continue
            out = r.stdout.strip() or json.dumps(dict(case=case, kernel=kernel, error=r.stderr.strip()[-300:]))
            print(out, flush=True)


if __name__ == "__main__":
    main()
