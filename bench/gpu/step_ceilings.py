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
- with --summary, the bandwidth-bound kernels against their bound: per kernel family (norms, SwiGLU,
  rotary, copy_rows, cuDNN's attention-backward helpers, bias-gradient sums, the loss, AdamW, the
  gradient norm) the bytes it must move a step at this shape (each tensor read or written once;
  caches and small tensors not counted), bound = bytes / the device copy's bandwidth, loom's time
  from the summary's top kernels, time / bound; then "everything else" with each of them at its
  bound, and what is left (other kernels, idle); then (bf16 linears) the passes that fusing the
  norms' scaling, SwiGLU and rotary into the GEMMs and attention would remove, each at the bound,
  and everything else with them gone. A kernel whose bytes the script cannot tell from its name is
  listed apart, unbounded. --copy-tbps gives the bandwidth instead of measuring it and prints only
  these tables: no GPU (nor torch) needed.

FLOP convention (docs/GPU.md): model FLOPs per step = (6 N + 12 L C T) x tokens, N = matmul
parameters (the head included); MFU = model FLOPs / (wall x 989 TFLOP/s). Attention's executed
FLOPs (causal: half the square) are what its TFLOP/s figure counts.

Prints markdown: the kernels' figures, then per part loom / ceiling, and the MFU the step would reach
with GEMM and attention at their ceilings and everything else as measured, and with nothing else.
usage: step_ceilings.py --preset 1b|7b [--micro-bsz N] [--seq-len T] [--summary TRACE.txt] [--step-s S]
                        [--copy-tbps TB/s]
"""
import argparse
import os
import re
import statistics
import sys

PRESETS = {  # hidden C, layers L, heads H (kv heads = H), head dim D, vocab V, mlp_ratio as loom's default
    "1b": dict(C=2048, L=24, H=16),
    "7b": dict(C=4096, L=32, H=32),
    "7b12": dict(C=4096, L=12, H=32),  # the 7b's layers, 12 of them (NeMo's recipe on an H100)
}
PEAK = 989e12
VOCAB = 103168
MLP_RATIO = 8 / 3
BF16, FP32 = 2, 4
# AdamW's traffic a parameter: fp32 master weight, m and v each read and written, the bf16
# gradient read, the bf16 weight written (loom's adamw_bf16_grads).
ADAMW_BYTES = 3 * 2 * FP32 + BF16 + BF16


def ffn_hidden(c):
    raw = int(c * MLP_RATIO)
    return 256 * ((raw + 255) // 256)


class Shape:
    """A preset's shape (letters as in docs: C hidden, L layers, H heads, K kv heads, D head dim,
    F ffn hidden, V vocab, T tokens a step) and its parameter counts, as loom counts them."""

    def __init__(self, preset, micro_bsz, seq_len, micro_num=1, fp8=False):
        p = PRESETS[preset]
        self.preset, self.C, self.L, self.H = preset, p["C"], p["L"], p["H"]
        self.K, self.D, self.F, self.V = self.H, self.C // self.H, ffn_hidden(self.C), VOCAB
        self.bsz, self.seq_len = micro_bsz or (4 if preset == "1b" else 1), seq_len
        self.T = self.bsz * seq_len  # tokens a micro-batch
        self.M, self.fp8 = micro_num, fp8
        C, L, H, K, D, F, V = self.C, self.L, self.H, self.K, self.D, self.F, self.V
        self.matmul_params = L * (C * (H + 2 * K) * D + H * D * C + 3 * C * F) + C * V
        # trainer/model/model.cpp's count: embedding, per layer two norms, wqkv and wo with their
        # biases, w1-w3; the final norm; the untied head.
        self.params = V * C + L * (2 * C + (H + 2 * K) * D * (C + 1) + (H * D + 1) * C + 3 * C * F) + C + V * C

    def line(self):
        batch = (f"{self.T} tokens a step" if self.M == 1 else
                 f"{self.T} tokens a micro-batch, {self.M} micro-batches a step")
        return (f"Shape: C {self.C}, L {self.L}, H {self.H} (kv {self.K}), D {self.D}, F {self.F}, V {self.V}; "
                f"micro_bsz {self.bsz} x seq_len {self.seq_len} = {batch}; "
                + ("the layers' linears in FP8" if self.fp8 else "bf16"))


def timed(fn, iters, warmup=3):
    import torch

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


def fp8_gemms(x, w, dy, iters):
    """Seconds of a linear's three GEMMs in FP8 as model.precision=fp8 runs them (docs/GPU.md):
    forward e4m3 x e4m3 with fast accumulation, both gradients e5m2 x e4m3 with full accumulation;
    operands quantized beforehand (the quantization is timed in the bound table, not here)."""
    import torch

    e4, e5, bf = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16
    one = torch.ones((), device=x.device, dtype=torch.float32)
    x8, w8, dy8 = x.to(e4), w.to(e4), dy.to(e5)
    w8_t, x8_t, dy8_t = w8.t().contiguous(), x8.t().contiguous(), dy8.t().contiguous()
    # _scaled_mm takes its first operand row-major and its second column-major (both K-major).
    fwd = timed(lambda: torch._scaled_mm(x8, w8.t(), one, one, out_dtype=bf, use_fast_accum=True), iters)
    dx = timed(lambda: torch._scaled_mm(dy8, w8_t.t(), one, one, out_dtype=bf), iters)
    dw = timed(lambda: torch._scaled_mm(dy8_t, x8_t.t(), one, one, out_dtype=bf), iters)
    return fwd + dx + dw


def gemm_ceiling(tok, c, f, h, k, d, layers, vocab, iters, fp8=False):
    """(seconds per micro-batch, FLOPs, rows) of every linear's three GEMMs at loom's shapes; with
    fp8 the layers' linears in FP8 (the head stays bf16, as in loom)."""
    import torch

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
        if fp8 and name != "head":
            s = fp8_gemms(x, w, dy, iters)
        else:
            fwd = timed(lambda: torch.matmul(x, w.t()), iters)
            dx = timed(lambda: torch.matmul(dy, w), iters)
            dw = timed(lambda: torch.matmul(dy.t(), x), iters)
            s = fwd + dx + dw
        flops = 3 * 2 * tok * i * o
        rows.append((name + (" (fp8)" if fp8 and name != "head" else ""), f"[{tok}, {i}] x [{i}, {o}]", n, s,
                     flops / s))
        total_s += n * s
        total_flops += n * flops
        del x, w, dy
    return total_s, total_flops, rows


def attention_ceiling(b, h, t, d, layers, iters):
    """{kernel: seconds per step (forward + backward, x layers)} and the executed FLOPs per layer."""
    import torch
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
    import torch

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


def bound_families(s):
    """(family, kernel-name regex, what it moves, bytes, per) of loom's bandwidth-bound kernels at shape
    s: per "call", bytes a launch (times the summary's launches); "step", bytes a step (a kernel
    launched in chunks or batches: per micro-batch ones times M); "launches", bytes a function of the
    launches. kv heads = H in the presets; one rank (AdamW over every parameter, once a step)."""
    T, C, H, K, D, F, V, L, M = s.T, s.C, s.H, s.K, s.D, s.F, s.V, s.L, s.M
    act = T * C * BF16
    fams = [
        ("rmsnorm fwd", r"rmsnorm_fwd<__nv_bfloat16>",
         "x, r read; h, y written: 4 [T, C] (the first norm has no r: 2)", 4 * act, "call"),
        ("rmsnorm bwd", r"rmsnorm_bwd<__nv_bfloat16(, \d+)?>", "dy, h, d(residual) read; dx written: 4 [T, C]", 4 * act, "call"),
        ("final norm fwd (fp32)", r"rmsnorm_fwd<float>", "x read, y written: 2 [T, C] fp32", 2 * T * C * FP32, "call"),
        ("final norm bwd (fp32)", r"rmsnorm_bwd<float(, \d+)?>", "dy, x read, dx written: 3 [T, C] fp32", 3 * T * C * FP32,
         "call"),
        ("swiglu fwd", r"swiglu_fwd_vec8|swiglu_fwd<__nv_bfloat16>", "gate, up read; y written: 3 [T, F]", 3 * T * F * BF16, "call"),
        ("swiglu bwd", r"swiglu_bwd_vec8|swiglu_bwd<__nv_bfloat16>", "dy, gate, up read; d(gate), d(up) written: 5 [T, F]", 5 * T * F * BF16, "call"),
        ("rotary", r"rotary_kernel_vec8|rotary_kernel<__nv_bfloat16>", "q or k (or its gradient) read and written: 2 [T, H, D]; cos, sin [T, D/2] fp32",
         2 * T * H * D * BF16 + 2 * T * (D // 2) * FP32, "call"),
        ("copy_rows", r"copy_rows_kernel<\w+, __nv_bfloat16>", "v (or its gradient) read and written: 2 [T, K, D]", 2 * T * K * D * BF16,
         "call"),
        ("cuDNN attention bwd: rowsum(dO O)", r"compute_dot_do_o", "dO, O read: 2 [T, H, D]", 2 * T * H * D * BF16,
         "call"),
        ("cuDNN attention bwd: dQ to bf16", r"convert_dq_to_16bits", "dQ read (fp32), written (bf16): [T, H, D]",
         T * H * D * (FP32 + BF16), "call"),
        ("bias gradients (sums over tokens)", r"reduce_kernel<.*ReduceOp<c10::BFloat16|column_sum_(partial|finish)",
         "dY of wqkv [T, (H+2K)D] and of wo [T, C] read, each layer" + (", each micro-batch" if M > 1 else ""),
         M * L * T * ((H + 2 * K) * D + C) * BF16, "step"),
        ("cross_entropy", r"cross_entropy_kernel", "logits [T, V] read, their gradient written in place"
         + (", each micro-batch" if M > 1 else ""), M * 2 * T * V * BF16, "step"),
        ("AdamW", r"adamw_kernel", "fp32 weight, m, v read and written, bf16 gradient read, bf16 weight written: "
         f"{ADAMW_BYTES} B a parameter x {s.params / 1e9:.3f} B parameters",
         ADAMW_BYTES * s.params, "step"),
        ("gradient norm", r"::partial_kernel\(", f"bf16 gradients read: {BF16} B a parameter", BF16 * s.params, "step"),
    ]
    if s.fp8:
        # Quantizing reads a bf16 tensor and writes its e4m3/e5m2 copy in two layouts: 4 B an element.
        # Each micro-batch: the inputs of wqkv, wo, w1+w2 (one) and w3, their output gradients, and the
        # maxima measured of attention's output and of the two residual gradients (wo's, w3's). The
        # weights (5 a layer) are quantized as often as the launches beyond the inputs' say: every
        # micro-batch, or once a step with the weight cache.
        inputs = L * M * T * (2 * C + H * D + F)
        weights = C * (H + 2 * K) * D + H * D * C + 3 * C * F  # a layer's

        def e4m3(n):
            return 4 * inputs + 4 * max(n - 4 * L * M, 0) // 5 * weights

        fams += [
            ("FP8 quantize e4m3", r"quantize_bf16<\(__nv_fp8_interpretation_t\)0>",
             "4 inputs a layer (T C, T HD, T C, T F) and the 5 weights, each quantized: bf16 read, 2 copies written: "
             "4 B an element", e4m3, "launches"),
            ("FP8 quantize e5m2", r"quantize_bf16<\(__nv_fp8_interpretation_t\)1>",
             "5 output gradients a layer (T (H+2K)D, T C, 2 T F, T C): 4 B an element",
             4 * L * M * T * ((H + 2 * K) * D + 2 * C + 2 * F), "step"),
            ("FP8 amax measured", r"amax_bf16_vec8", "attention's output and 2 residual gradients a layer read: "
             "T (HD + 2 C)", BF16 * L * M * T * (H * D + 2 * C), "step"),
        ]
    return fams


def summary_text(path):
    """What bound_table needs of trace_summary.py's text: the top kernels [(ms a step, launches a
    step, category, name)], the GPU time by category {category: ms}, the profiled steps' windows
    (ms) and the busiest stream's idle ms a step (None when absent)."""
    kernels, windows, idle, section = [], [], None, ""
    top = re.compile(r"^\s+([\d.]+) ms\s+[\d.]+% n=\s*(\d+) avg\s+[\d.]+ us \[(\w+)\] (.*)$")
    with open(path, errors="replace") as f:
        lines = f.readlines()
    for line in lines:
        if line.startswith("=="):
            section = line
        m = top.match(line)
        if section.startswith("== top") and m:
            kernels.append((float(m.group(1)), int(m.group(2)), m.group(3), m.group(4).strip()))
        m = re.match(r"ProfilerStep#\d+: host range [\d.]+ ms, window ([\d.]+) ms", line)
        if m:
            windows.append(float(m.group(1)))
        m = re.match(r"== idle on the busiest stream \(.*\): ([\d.]+) ms/step", line)
        if m:
            idle = float(m.group(1))
    return kernels, loom_parts(path), windows, idle


def bare(name, n=60):
    """A kernel's name from the summary without "void" and namespaces, cut to n."""
    s = re.sub(r"\b[A-Za-z_]\w*::", "", name.replace("(anonymous namespace)::", ""))
    s = re.sub(r"^void ", "", s)
    return s if len(s) <= n else s[: n - 3] + "..."


def bound_table(shape, path, bw, step_s):
    """The bandwidth-bound kernels of the summary at path against bytes / bw, and what the step's
    "everything else" would be with each at its bound (returned, ms; None when the summary lists no
    kernels)."""
    kernels, parts, windows, idle = summary_text(path)
    if not kernels:
        print(f"{path}: no lines of trace_summary.py's top kernels (expected '  MS ms PCT% n= N avg US us "
              f"[CATEGORY] NAME' under '== top'): no bound table", file=sys.stderr)
        return None
    fams = bound_families(shape)
    got = {f[0]: [0.0, 0] for f in fams}
    unbounded = []
    for ms, n, cat, name in kernels:
        if cat in ("gemm", "attention"):
            continue
        fam = next((f[0] for f in fams if re.search(f[1], name)), None)
        if fam is None:
            unbounded.append((ms, n, name))
        else:
            got[fam][0] += ms
            got[fam][1] += n
    print(f"\n#### Bandwidth-bound kernels against their bound ({bw / 1e12:.2f} TB/s device copy; T = {shape.T} "
          f"tokens; bf16 unless said)\n")
    print("| kernel family | moves | launches a step | GB a step | bound ms | loom ms | loom / bound |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    loom_ms = bound_ms = at_bound = 0.0  # at_bound: each at its bound, or as measured where faster
    gaps = []  # (ms over the bound, family)
    for name, _, moves, nbytes, per in fams:
        ms, n = got[name]
        total = nbytes(n) if per == "launches" else nbytes * (n if per == "call" else 1)
        bound = total / bw * 1e3
        if n == 0:
            print(f"| {name} | {moves} | - | {total / 1e9:.2f} | {bound:.2f} | not in the summary | - |")
            continue
        loom_ms, bound_ms, at_bound = loom_ms + ms, bound_ms + bound, at_bound + min(ms, bound)
        if ms - bound >= 0.005:  # over it by at least what the table prints
            gaps.append((ms - bound, name))
        print(f"| {name} | {moves} | {n} | {total / 1e9:.2f} | {bound:.2f} | {ms:.2f} | {ms / bound:.2f} |")
    print(f"| all of the above | | | | {bound_ms:.2f} | {loom_ms:.2f} | {loom_ms / max(bound_ms, 1e-9):.2f} |\n")
    if gaps:  # where the next milliseconds are, largest first
        print("- over their bound, ms a step: "
              + ", ".join(f"{name} {gap:.2f}" for gap, name in sorted(gaps, reverse=True)))
    if unbounded:
        print(f"- not bounded here (bytes not known from the name), of the summary's top kernels: "
              f"{sum(u[0] for u in unbounded):.2f} ms a step: " + "; ".join(
                  f"{bare(name)} {ms:.2f} ms (n={n})" for ms, n, name in sorted(unbounded, reverse=True)[:6])
              + ("; ..." if len(unbounded) > 6 else ""))
    step = step_s * 1e3 if step_s else sum(windows) / max(len(windows), 1)
    where = "the unprofiled step's wall time" if step_s else "the profiled steps' mean window"
    rest = step - parts.get("gemm", 0.0) - parts.get("attention", 0.0)
    kernels_ms = sum(v for k, v in parts.items() if k not in ("gemm", "attention"))
    print(f"- everything else: {rest:.1f} ms a step ({where} {step:.1f} - GEMM {parts.get('gemm', 0.0):.1f} "
          f"- attention {parts.get('attention', 0.0):.1f})")
    print(f"- of it: the kernels above {loom_ms:.1f} ms (at their bound {bound_ms:.1f}); other kernels "
          f"{kernels_ms - loom_ms:.1f} ms (not bounded here or not among the summary's top kernels; all streams); "
          f"idle {rest - kernels_ms:.1f} ms (the rest, net of kernels of other streams that overlap the busiest "
          f"one, which idles " + (f"{idle:.2f} ms a step)" if idle is not None else "- ms: not in the summary)"))
    print(f"- with every kernel above at its bound (or as measured where faster), everything else would take "
          f"{rest - loom_ms + at_bound:.1f} ms ({loom_ms - at_bound:.1f} ms less)")
    return rest - loom_ms + at_bound


def fusions(s):
    """(fusion, the passes it removes, bytes a step) at shape s, bf16 activations, each micro-batch:
    tensors one kernel writes and the next reads back, net of what the fused kernel reads instead.
    The loss is not among them: at its bound (one read of the logits, one write of their gradient)
    it moves what any kernel needing the whole row's log-sum-exp must."""
    T, C, H, K, D, F, L, M = s.T, s.C, s.H, s.K, s.D, s.F, s.L, s.M
    return [
        # The norm kernel still reads x and r and writes h (and rstd): the GEMM, and the weight
        # gradient after it, read h for the norm's output and scale it as they load it.
        ("the RMSNorm's scaling in the operand loads of the GEMMs after it (wqkv, w1+w2, and their weight "
         "gradients)", "the norm's output written: 2 norms a layer x [T, C]", M * L * 2 * T * C * BF16),
        # w3's weight gradient then reads gate and up for the product: one [T, F] more.
        ("SwiGLU in w3's operand loads, its backward in the epilogue of w3's input gradient",
         "the product written and read back, its gradient written and read back, less w3's weight gradient "
         "reading gate and up: 3 [T, F]", M * L * 3 * T * F * BF16),
        ("rotary and v in the attention kernel's loads and stores",
         "q, k, v written and read back, their gradients written and read back: 4 [T, (H + 2K) D]",
         M * L * 4 * T * (H + 2 * K) * D * BF16),
    ]


def fusion_table(shape, bw, at_bound, goal):
    """The passes each fusion removes, at the copy bandwidth, and everything else with every kernel at
    its bound (at_bound, ms) and that fusion and the ones above it made, against the goal (ms, or None)."""
    print(f"\n#### Passes a fusion would remove ({bw / 1e12:.2f} TB/s device copy)\n")
    print("| fusion | removes | GB a step | ms at the bound | everything else with every kernel at its bound "
          "and this fusion and those above |")
    print("| --- | --- | ---: | ---: | ---: |")
    left = at_bound
    for name, removes, nbytes in fusions(shape):
        ms = nbytes / bw * 1e3
        left -= ms
        print(f"| {name} | {removes} | {nbytes / 1e9:.2f} | {ms:.2f} | {left:.1f} |")
    print(f"\n- every kernel at its bound: {at_bound:.1f} ms" + (f"; goal <= {goal:g}" if goal is not None else "")
          + ". cuBLAS(Lt) and cuDNN take none of these prologues or epilogues (cuBLASLt's bias-gradient epilogue "
          "runs as a kernel of its own on sm_90): each needs a GEMM or attention kernel of loom's own")


def rest_goal_ms(a, shape):
    """The goal for everything but GEMM and attention: --rest-goal-ms, else 34 ms for the 1b at
    micro_bsz 4 x 4096, one micro-batch a step (64% MFU on an H200 with GEMM and attention at their
    ceilings), else none."""
    if a.rest_goal_ms is not None:
        return a.rest_goal_ms
    if a.preset == "1b" and shape.bsz == 4 and shape.seq_len == 4096 and shape.M == 1:
        return 34.0
    return None


def budget_line(a, shape, summary, step_s):
    """The target line: everything but GEMM and attention (the unprofiled step's wall time less the
    profiled step's GEMM and attention) against its goal."""
    goal = rest_goal_ms(a, shape)
    if goal is None:
        return
    parts = loom_parts(summary)
    gemm, attn = parts.get("gemm", 0.0), parts.get("attention", 0.0)
    rest = step_s * 1e3 - gemm - attn
    print(f"target {a.preset} everything but GEMM and attention: {rest:.1f} ms a step (wall {step_s * 1e3:.1f} - "
          f"GEMM {gemm:.1f} - attention {attn:.1f}; goal <= {goal:g}): {'met' if rest <= goal else 'not met'}")


def gpu_ceilings(a, shape):
    """The measured ceilings (GEMM, attention, copy bandwidth) and, with --summary, loom's parts
    against them and the bound table."""
    import torch

    c, layers, h, d, f, tok = shape.C, shape.L, shape.H, shape.D, shape.F, shape.T
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"### Ceilings of a {a.preset} step ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()})\n")
    print(f"{shape.line()}; median of {a.iters} timed calls each.\n")

    # Per micro-batch, then times the micro-batches a step: each runs every GEMM and attention once.
    M = shape.M
    gemm_s, gemm_flops, rows = gemm_ceiling(tok, c, f, h, h, d, layers, VOCAB, a.iters, shape.fp8)
    per = "per micro-batch" if M > 1 else "per step"
    print(f"| linear | GEMM (forward) | {per} | ms (fwd + 2 bwd) | TFLOP/s |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, dims, n, s, rate in rows:
        print(f"| {name} | {dims} | {n} | {s * 1e3:.3f} | {rate / 1e12:.0f} |")
    print(f"| all, a step | | {'x' + str(M) if M > 1 else ''} | {M * gemm_s * 1e3:.2f} | "
          f"{gemm_flops / gemm_s / 1e12:.0f} ({100 * gemm_flops / gemm_s / PEAK:.1f}% of the bf16 peak) |\n")

    attn, attn_flops = attention_ceiling(shape.bsz, h, a.seq_len, d, layers, a.iters)
    attn = {name: M * s for name, s in attn.items()}
    for name, s in attn.items():
        print(f"- attention, {name}: {s * 1e3:.2f} ms a step (x{layers} layers{f' x{M} micro-batches' if M > 1 else ''}, "
              f"forward + backward), {M * layers * attn_flops / s / 1e12:.0f} TFLOP/s executed (causal)")
    bw = bandwidth(a.iters)
    print(f"- device-to-device copy of 2 GiB: {bw / 1e12:.2f} TB/s (read + write)\n")
    return M * gemm_s, attn, bw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=PRESETS, required=True)
    ap.add_argument("--micro-bsz", type=int, default=None, help="default: 4 for 1b, 1 for 7b")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--micro-num", type=int, default=1, help="micro-batches a step (data.micro_num)")
    ap.add_argument("--fp8", action="store_true", help="the layers' linears in FP8 (model.precision=fp8): adds "
                    "the quantization kernels to the bound table")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--summary", help="trace_summary.py's output for a profiled step of the same shape")
    ap.add_argument("--step-s", type=float, help="wall seconds per step of an unprofiled run (loom_train.sh step_s)")
    ap.add_argument("--recompute-layers", type=int, default=0, help="layers whose forward the step runs twice")
    ap.add_argument("--rest-goal-ms", type=float,
                    help="goal for everything but GEMM and attention, ms a step (default: 34 for the 1b at "
                         "micro_bsz 4, one micro-batch a step; else none); with --summary and --step-s prints "
                         "a target line, met or not met")
    ap.add_argument("--copy-tbps", type=float,
                    help="the device copy's bandwidth (TB/s, read + write) in place of measuring it: prints the "
                         "bound table of --summary only, without a GPU")
    a = ap.parse_args()
    if a.micro_num < 1:
        ap.error("--micro-num must be at least 1")
    shape = Shape(a.preset, a.micro_bsz, a.seq_len, a.micro_num, a.fp8)
    if a.copy_tbps is not None:
        if not a.summary or a.copy_tbps <= 0:
            ap.error("--copy-tbps needs --summary and a bandwidth > 0")
        if not os.path.isfile(a.summary):
            ap.error(f"--summary {a.summary}: no such file")
        print(f"### Bandwidth-bound kernels of a {a.preset} step (copy bandwidth given: {a.copy_tbps} TB/s)\n")
        print(f"{shape.line()}.")
        if a.step_s:
            budget_line(a, shape, a.summary, a.step_s)
        at_bound = bound_table(shape, a.summary, a.copy_tbps * 1e12, a.step_s)
        if at_bound is None:
            return 1
        if not shape.fp8:  # FP8 quantizes what the norms and SwiGLU make: other passes
            fusion_table(shape, a.copy_tbps * 1e12, at_bound, rest_goal_ms(a, shape))
        return 0
    if a.summary and not os.path.isfile(a.summary):  # the ceilings are still worth measuring
        print(f"--summary {a.summary}: no such file; loom's side left out", file=sys.stderr)
        a.summary = None
    gemm_s, attn, bw = gpu_ceilings(a, shape)
    layers, c, tok = shape.L, shape.C, shape.T
    n_params = shape.matmul_params
    model_flops = (6 * n_params + 12 * layers * c * a.seq_len) * tok * shape.M
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
        for goal in (0.60, 0.64) + ((800e12 / PEAK,) if shape.fp8 else ()):  # 800: the FP8 recipe's goal
            budget = model_flops / (goal * PEAK) - gemm_ceil - attn_ceil
            print(f"- {goal:.0%} MFU needs a step of {model_flops / (goal * PEAK) * 1e3:.1f} ms: with GEMM and attention "
                  f"at their ceilings, {budget * 1e3:.1f} ms for everything else (now {rest * 1e3:.1f})")

    if a.summary and a.step_s:
        budget_line(a, shape, a.summary, a.step_s)
    if a.summary:
        at_bound = bound_table(shape, a.summary, bw, a.step_s)
        if at_bound is None:
            return 1
        if not shape.fp8:
            fusion_table(shape, bw, at_bound, rest_goal_ms(a, shape))
    return 0


if __name__ == "__main__":
    sys.exit(main())
