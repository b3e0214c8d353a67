#!/usr/bin/env python3
"""Summarises a Kineto chrome trace of loom-train --profiling (run_dir/profile_trace.json) into a
page of text small enough to bring back from the GPU machine: where a step's GPU time goes.

- per recorded step (ProfilerStep#i): wall span, GPU busy time (union of kernels, memcpy, memset
  over all streams) and idle time, per stream;
- GPU time by category (GEMM, attention, loss, optimizer, norm/rotary/SwiGLU, elementwise,
  reductions, copies, communication, other) and the top kernels by total time;
- GPU time by the CPU op that launched it (innermost aten:: op or loom range);
- idle time on the busiest stream: how much of it had other streams busy (by kernel), came before
  the next kernel's launch returned (the host late) or neither; its gaps grouped by the kernels
  around them (count and time a step); then the largest gaps, each with what ran meanwhile on
  other streams (a cross-stream wait shows as this stream idling while another runs), when the
  kernel after the gap was launched and, if late, what its launching thread did from its previous
  launch or the gap's opening, whichever came first, to this launch (self time of its innermost CPU
  ops and runtime calls: a slow allocation, an autograd node or a lock shows), and the CUDA
  runtime calls of all threads during the gap;
- host syncs: cudaStreamSynchronize / cudaDeviceSynchronize / cudaEventSynchronize / synchronous
  cudaMemcpy and aten::_local_scalar_dense (item()), with their time and enclosing loom range.

usage: trace_summary.py TRACE.json [--top 40]
"""
import argparse
import bisect
import collections
import json
import re
import sys

CATS = [
    ("comm", re.compile(r"nccl", re.I)),  # first: ncclDevKernel_ReduceScatter_Sum would match "reduce"
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("loss", re.compile(r"cross_entropy|xent|log_softmax|nll", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("gemm", re.compile(r"gemm|sm90_xmma|cutlass|nvjet|cublas|wgmma|splitK|matmul|Kernel2", re.I)),
    ("loom_fused", re.compile(r"rmsnorm|rotary|swiglu|loom", re.I)),
    ("reduce", re.compile(r"reduce|norm|sum|Reduce", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|copy|fill|cat|index", re.I)),
]
SYNC_CALLS = re.compile(r"cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|^cudaMemcpy$|"
                        r"cudaStreamWaitEvent|cudaMemcpyAsync")


def category(ev):
    if ev.get("cat") == "gpu_memcpy":
        return "memcpy"
    if ev.get("cat") == "gpu_memset":
        return "memset"
    name = ev["name"]
    for c, rx in CATS:
        if rx.search(name):
            return c
    return "other"


def union_len(intervals):
    total, end = 0.0, -1e30
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def short(name, n=110):
    return name if len(name) <= n else name[: n - 3] + "..."


def kname(name, n=60):
    """A kernel's name without its parameter list, namespaces and leading "void", cut to n."""
    if name.startswith(("Memcpy", "Memset")):
        return name
    s = re.sub(r"\b[A-Za-z_]\w*::", "", name.replace("(anonymous namespace)::", ""))
    s = s[5:] if s.startswith("void ") else s
    depth = 0
    for i, ch in enumerate(s):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0 and i > 0:
            s = s[:i]
            break
    return short(s, n)


def overlap(a0, a1, b0, b1):
    return max(0.0, min(a1, b1) - max(a0, b0))


class Threads:
    """Per host thread: its CPU ops and runtime calls as one nested timeline (a parent index per
    event, from a stack over start order), and the runtime calls that put work on the GPU."""

    def __init__(self, cpu_ops, runtime, gpu):
        launched = {e.get("args", {}).get("correlation") for e in gpu} - {None}
        self.ev, self.parent, self.starts = {}, {}, {}
        self.launches, self.launch_starts = {}, {}
        per = collections.defaultdict(list)
        for e in cpu_ops + runtime:
            per[e["tid"]].append(e)
        for tid, v in per.items():
            v.sort(key=lambda e: (e["ts"], -e["dur"]))
            parent, stack = [], []
            for i, e in enumerate(v):
                while stack and v[stack[-1]]["ts"] + v[stack[-1]]["dur"] <= e["ts"]:
                    stack.pop()
                parent.append(stack[-1] if stack else -1)
                stack.append(i)
            self.ev[tid], self.parent[tid], self.starts[tid] = v, parent, [e["ts"] for e in v]
            ls = [e for e in v if e.get("cat") in ("cuda_runtime", "cuda_driver")
                  and e.get("args", {}).get("correlation") in launched]
            self.launches[tid], self.launch_starts[tid] = ls, [e["ts"] for e in ls]

    def previous_launch_end(self, tid, ts):
        """End of the last GPU-work call of thread tid that started before ts (None: none)."""
        i = bisect.bisect_left(self.launch_starts.get(tid, []), ts) - 1
        return None if i < 0 else self.launches[tid][i]["ts"] + self.launches[tid][i]["dur"]

    def self_times(self, tid, t0, t1):
        """{name: [self time inside [t0, t1], count, summed duration]} of the events of thread tid
        overlapping the window (self: less the overlap of their children), and the window's time
        outside every event."""
        v, parent, starts = self.ev.get(tid, []), self.parent.get(tid, []), self.starts.get(tid, [])
        inside = set(range(bisect.bisect_right(starts, t0), bisect.bisect_left(starts, t1)))
        j = bisect.bisect_right(starts, t0) - 1  # the innermost event open at t0 and its ancestors
        while j >= 0:
            if v[j]["ts"] + v[j]["dur"] > t0:
                inside.add(j)
            j = parent[j]
        ov = {i: overlap(v[i]["ts"], v[i]["ts"] + v[i]["dur"], t0, t1) for i in inside}
        own = dict(ov)
        for i in inside:
            if parent[i] in own:
                own[parent[i]] -= ov[i]
        out = {}
        for i, t in own.items():
            row = out.setdefault(v[i]["name"], [0.0, 0, 0.0])
            row[0] += max(t, 0.0)
            row[1] += 1
            row[2] += v[i]["dur"]
        roots = sum(ov[i] for i in inside if parent[i] not in ov)
        return out, max(t1 - t0 - roots, 0.0)


def on_other_streams(others, t0, t1):
    """({kernel: overlap} of the other streams' GPU events inside [t0, t1], their clipped spans);
    others = (events sorted by start, their starts, the longest duration)."""
    on, spans = collections.Counter(), []
    for e in others[0][max(bisect.bisect_left(others[1], t0 - others[2]), 0):bisect.bisect_left(others[1], t1)]:
        o = overlap(e["ts"], e["_end"], t0, t1)
        if o > 0:
            on[kname(e["name"], 40)] += o
            spans.append((max(e["ts"], t0), min(e["_end"], t1)))
    return on, spans


def gap_causes(gaps, others, corr_rt, nsteps):
    """One line: the idle time with other streams busy (by kernel), before the next kernel's
    launch call returned (the host late), and neither (launch latency, waits on events)."""
    busy, late, neither = collections.Counter(), 0.0, 0.0
    for g, t0, _, after in gaps:
        on, spans = on_other_streams(others, t0, t0 + g)
        busy.update(on)
        ra = corr_rt.get(after.get("args", {}).get("correlation"))
        if ra is not None and ra["ts"] + ra["dur"] > t0:
            spans.append((t0, min(ra["ts"] + ra["dur"], t0 + g)))
            late += spans[-1][1] - t0
        neither += g - union_len(spans)
    total = sum(busy.values())
    print(f"  while idle, ms a step (the first two may overlap): other streams busy {total / 1e3 / nsteps:.2f}"
          + (" (" + ", ".join(f"{n} {d / 1e3 / nsteps:.2f}" for n, d in busy.most_common(3) if d >= 5 * nsteps)
             + ")" if total >= 5 * nsteps else "")
          + f"; before the next kernel's launch returned (host late) {late / 1e3 / nsteps:.2f}; neither "
          f"{neither / 1e3 / nsteps:.2f}")


def gap_lines(k, g, t0, before, after, others, threads, corr_rt, enclosing, rt_sorted, rt_starts):
    """The three lines of one gap of the busiest stream: the kernels and the launch, the other
    streams meanwhile, the launching thread's time and the runtime calls of all threads."""
    t1 = t0 + g
    ra = corr_rt.get(after.get("args", {}).get("correlation"))
    inner, outer = enclosing(ra["tid"], ra["ts"]) if ra else (None, None)
    when = ("launch not found" if ra is None else f"launched {(ra['ts'] - t0) / 1e3:+.2f} ms into the gap"
            if ra["ts"] >= t0 else f"queued {(t0 - ra['ts']) / 1e3:.2f} ms before the gap")
    print(f"  gap {k}: {g / 1e3:.3f} ms {kname(before['name'])} -> {kname(after['name'])}; "
          f"launched by {inner or '(no cpu op)'} in {outer or '(no loom range)'}, {when}")
    on, spans = on_other_streams(others, t0, t1)
    print(f"  gap {k} other streams: " + (f"busy {union_len(spans) / 1e3:.2f} ms of it: " + ", ".join(
        f"{n} {d / 1e3:.2f} ms" for n, d in on.most_common(3) if d >= 5) if on else "idle"))
    if ra is not None and ra["ts"] > t0:
        # From its previous launch or the gap's opening, whichever came first, to this launch: the
        # time the stream waited on this thread (it may have launched work elsewhere meanwhile).
        prev = threads.previous_launch_end(ra["tid"], ra["ts"])
        w0 = t0 if prev is None or prev >= t0 else prev
        since = "the gap opened" if w0 == t0 else "its previous launch"
        times, outside = threads.self_times(ra["tid"], w0, ra["ts"])
        top = sorted(times.items(), key=lambda kv: -kv[1][0])[:4]
        parts = [f"{n} {t / 1e3:.2f} ms" + (f" ({c} of them)" if c > 1 else f" (of its {d / 1e3:.2f})")
                 for n, (t, c, d) in top if t > 0]
        if outside >= 5:
            parts.append(f"outside any op {outside / 1e3:.2f} ms")
        host = f"thread {ra['tid']}, {(ra['ts'] - w0) / 1e3:.2f} ms since {since}: " + ", ".join(parts)
    else:
        host = "the host launched it in time"
    calls = collections.Counter()
    for r in rt_sorted[bisect.bisect_left(rt_starts, t0 - 50000):bisect.bisect_left(rt_starts, t1)]:
        calls[r["name"]] += overlap(r["ts"], r["ts"] + r["dur"], t0, t1)
    calls = [(n, d) for n, d in calls.most_common(3) if d > 0]
    print(f"  gap {k} host: {host}; CUDA calls in the gap: "
          + (", ".join(f"{n} {d / 1e3:.2f} ms" for n, d in calls) or "none"))


def idle_gaps(by_stream, main_stream, span, nsteps, threads, corr_rt, enclosing, pairs=12, largest=8):
    """The busiest stream's idle time: what else ran or held it, its gaps by the pair of kernels
    around them, then the largest gaps (at most two of a pair) one by one."""
    ms = sorted((e for e in by_stream[main_stream] if span[0] <= e["ts"] < span[1]), key=lambda e: e["ts"])
    gaps = []
    end, prev = None, None
    for e in ms:
        if end is not None and e["ts"] > end:
            gaps.append((e["ts"] - end, end, prev, e))
        if end is None or e["_end"] > end:
            end, prev = e["_end"], e
    total_gap = sum(g[0] for g in gaps)
    small = sum(g[0] for g in gaps if g[0] < 20)
    print(f"\n== idle on the busiest stream ({main_stream}): {total_gap / 1e3 / nsteps:.2f} ms/step in "
          f"{len(gaps) / nsteps:.0f} gaps/step; gaps < 20 us: {small / 1e3 / nsteps:.2f} ms/step")
    other = sorted((e for s, v in by_stream.items() if s != main_stream for e in v), key=lambda e: e["ts"])
    others = (other, [e["ts"] for e in other], max((e["dur"] for e in other), default=0.0))
    gap_causes(gaps, others, corr_rt, nsteps)
    by_pair = collections.defaultdict(lambda: [0, 0.0])
    for g, _, before, after in gaps:
        row = by_pair[(kname(before["name"]), kname(after["name"]))]
        row[0] += 1
        row[1] += g
    print(f"  gaps by the kernels before and after them, top {pairs} by time (count and ms a step):")
    for (b, a), (n, d) in sorted(by_pair.items(), key=lambda kv: -kv[1][1])[:pairs]:
        count = f"{n // nsteps}" if n % nsteps == 0 else f"{n / nsteps:.1f}"
        print(f"  pair {count} x {d / n / 1e3:.3f} ms = {d / 1e3 / nsteps:.2f} ms/step: {b} -> {a}")
    rt_sorted = sorted((r for v in threads.ev.values() for r in v if r.get("cat") in ("cuda_runtime", "cuda_driver")),
                       key=lambda r: r["ts"])
    rt_starts = [r["ts"] for r in rt_sorted]
    print("  the largest gaps (at most 2 of a pair): other streams meanwhile; where the kernel after it was "
          "launched late, its thread's time up to the launch (self time of its innermost ops and calls)")
    shown = collections.Counter()
    k = 0
    for g, t0, before, after in sorted(gaps, key=lambda g: -g[0]):
        key = (kname(before["name"]), kname(after["name"]))
        if k == largest:
            break
        if shown[key] == 2:
            continue
        shown[key] += 1
        k += 1
        gap_lines(k, g, t0, before, after, others, threads, corr_rt, enclosing, rt_sorted, rt_starts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    with open(a.trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    xs = [e for e in events if e.get("ph") == "X" and "dur" in e]
    gpu = [e for e in xs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    runtime = [e for e in xs if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    cpu_ops = [e for e in xs if e.get("cat") in ("cpu_op", "user_annotation")]
    # Kineto may record a step's range more than once (nested): keep the longest per name.
    by_name = {}
    for e in xs:
        if e["name"].startswith("ProfilerStep#") and (e["name"] not in by_name or e["dur"] > by_name[e["name"]]["dur"]):
            by_name[e["name"]] = e
    steps = sorted(by_name.values(), key=lambda e: e["ts"])
    print(f"trace: {len(xs)} complete events, {len(gpu)} GPU, {len(runtime)} runtime, {len(cpu_ops)} CPU ops, "
          f"{len(steps)} ProfilerStep ranges")
    if not gpu:
        print("no GPU events: was the trace recorded with CUDA activities?")
    for e in gpu:
        e["_end"] = e["ts"] + e["dur"]
        e["_cat"] = category(e)

    # Per step: wall, GPU busy (any stream), per stream busy.
    by_stream = collections.defaultdict(list)
    for e in gpu:
        by_stream[e.get("args", {}).get("stream", e.get("tid"))].append(e)
    print("\n== steps (host ProfilerStep range; GPU busy = union of GPU events starting inside it)")
    gpu_sorted = sorted(gpu, key=lambda e: e["ts"])
    starts = [e["ts"] for e in gpu_sorted]
    windows = []
    for i, s in enumerate(steps):
        # A step's GPU work runs later than its host range: window = this step's start .. next start.
        t0 = s["ts"]
        t1 = steps[i + 1]["ts"] if i + 1 < len(steps) else max(e["_end"] for e in gpu) if gpu else s["ts"] + s["dur"]
        windows.append((t0, t1))
        lo, hi = bisect.bisect_left(starts, t0), bisect.bisect_left(starts, t1)
        evs = gpu_sorted[lo:hi]
        busy = union_len([(e["ts"], e["_end"]) for e in evs])
        per = collections.Counter()
        for e in evs:
            per[e.get("args", {}).get("stream", "?")] += e["dur"]
        print(f"{s['name']}: host range {s['dur'] / 1e3:.2f} ms, window {(t1 - t0) / 1e3:.2f} ms, GPU busy "
              f"{busy / 1e3:.2f} ms ({100 * busy / max(t1 - t0, 1e-9):.1f}%), {len(evs)} GPU events; per stream "
              + ", ".join(f"{k}: {v / 1e3:.2f} ms" for k, v in per.most_common()))
    span = (windows[0][0], windows[-1][1]) if windows else (min(starts), max(e["_end"] for e in gpu))
    nsteps = max(len(steps), 1)
    in_span = [e for e in gpu if span[0] <= e["ts"] < span[1]]
    total_gpu = sum(e["dur"] for e in in_span)

    print(f"\n== GPU time by category, per step (over {nsteps} steps; sum of event durations "
          f"{total_gpu / 1e3 / nsteps:.2f} ms/step)")
    cat = collections.Counter()
    catn = collections.Counter()
    for e in in_span:
        cat[e["_cat"]] += e["dur"]
        catn[e["_cat"]] += 1
    for c, d in cat.most_common():
        print(f"  {c:12s} {d / 1e3 / nsteps:8.2f} ms  {100 * d / total_gpu:5.1f}%  {catn[c] / nsteps:7.0f} launches")

    print(f"\n== top {a.top} kernels by total time per step")
    k = collections.Counter()
    kn = collections.Counter()
    kc = {}
    for e in in_span:
        k[e["name"]] += e["dur"]
        kn[e["name"]] += 1
        kc[e["name"]] = e["_cat"]
    for name, d in k.most_common(a.top):
        print(f"  {d / 1e3 / nsteps:8.2f} ms {100 * d / total_gpu:5.1f}% n={kn[name] / nsteps:5.0f} "
              f"avg {d / kn[name]:8.1f} us [{kc[name]}] {short(name)}")

    # Launch -> CPU op: correlation id of a kernel = its runtime launch; the innermost CPU op
    # (same thread) containing the launch names it; the outermost user_annotation (loom range) too.
    corr_rt = {}
    for r in runtime:
        c = r.get("args", {}).get("correlation")
        if c is not None:
            corr_rt[c] = r
    by_tid = collections.defaultdict(list)
    for o in cpu_ops:
        by_tid[o["tid"]].append(o)
    for v in by_tid.values():
        v.sort(key=lambda o: (o["ts"], -o["dur"]))
    tid_starts = {t: [o["ts"] for o in v] for t, v in by_tid.items()}

    def enclosing(tid, ts):
        """innermost cpu_op and outermost non-step annotation around ts on thread tid."""
        v = by_tid.get(tid)
        if not v:
            return None, None
        i = bisect.bisect_right(tid_starts[tid], ts)
        inner, outer = None, None
        # Scan back a bounded number of ops for containers (ops nest, so containers start earlier).
        for j in range(i - 1, max(-1, i - 4000), -1):
            o = v[j]
            if o["ts"] <= ts <= o["ts"] + o["dur"]:
                if o.get("cat") == "cpu_op" and inner is None:
                    inner = o["name"]
                if o.get("cat") == "user_annotation" and not o["name"].startswith("ProfilerStep#"):
                    outer = o["name"]
        return inner, outer

    op_time = collections.Counter()
    range_time = collections.Counter()
    op_n = collections.Counter()
    for e in in_span:
        r = corr_rt.get(e.get("args", {}).get("correlation"))
        if r is None:
            op_time["(no launch found)"] += e["dur"]
            continue
        inner, outer = enclosing(r["tid"], r["ts"])
        op_time[inner or "(no cpu op)"] += e["dur"]
        op_n[inner or "(no cpu op)"] += 1
        range_time[outer or "(no loom range)"] += e["dur"]
    print("\n== GPU time by loom range (outermost user annotation around the launch), per step")
    for name, d in range_time.most_common():
        print(f"  {d / 1e3 / nsteps:8.2f} ms {100 * d / total_gpu:5.1f}%  {name}")
    print(f"\n== GPU time by launching CPU op (innermost), top {a.top}, per step")
    for name, d in op_time.most_common(a.top):
        print(f"  {d / 1e3 / nsteps:8.2f} ms {100 * d / total_gpu:5.1f}% n={op_n[name] / nsteps:5.0f}  {short(name)}")

    # Idle gaps on the busiest stream.
    main_stream = max(by_stream, key=lambda s: sum(e["dur"] for e in by_stream[s])) if by_stream else None
    if main_stream is not None:
        idle_gaps(by_stream, main_stream, span, nsteps, Threads(cpu_ops, runtime, gpu), corr_rt, enclosing)

    print("\n== host syncs and read-backs, per step")
    sy = collections.Counter()
    syn = collections.Counter()
    for r in runtime:
        if span[0] <= r["ts"] < span[1] and SYNC_CALLS.search(r["name"]):
            sy[r["name"]] += r["dur"]
            syn[r["name"]] += 1
    for o in cpu_ops:
        if span[0] <= o["ts"] < span[1] and o["name"] in ("aten::_local_scalar_dense", "aten::item",
                                                          "aten::nonzero", "aten::to", "aten::copy_"):
            if o["name"] in ("aten::to", "aten::copy_"):
                continue
            sy[o["name"]] += o["dur"]
            syn[o["name"]] += 1
    for name, d in sy.most_common():
        print(f"  {name:32s} {syn[name] / nsteps:6.1f} calls {d / 1e3 / nsteps:8.2f} ms")
    items = [o for o in cpu_ops if o["name"] == "aten::_local_scalar_dense" and span[0] <= o["ts"] < span[1]]
    where = collections.Counter()
    for o in items:
        _, outer = enclosing(o["tid"], o["ts"])
        where[outer or "(no loom range)"] += o["dur"]
    for name, d in where.most_common():
        print(f"    item() inside {name}: {d / 1e3 / nsteps:.2f} ms/step")

    print("\n== loom ranges on the host, per step (ms)")
    rng = collections.Counter()
    rngn = collections.Counter()
    for o in cpu_ops:
        if o.get("cat") == "user_annotation" and not o["name"].startswith("ProfilerStep#"):
            rng[o["name"]] += o["dur"]
            rngn[o["name"]] += 1
    for name, d in rng.most_common():
        print(f"  {name:32s} {d / 1e3 / nsteps:8.2f} ms  n={rngn[name] / nsteps:.0f}")
    launches = sum(1 for r in runtime if "Launch" in r["name"] and span[0] <= r["ts"] < span[1])
    print(f"\nkernel launches per step: {launches / nsteps:.0f}")

    # Communication (NCCL kernels, their own stream) hidden under compute on the other streams:
    # what ZeRO-3's prefetched gathers must achieve.
    comm = [e for e in in_span if e["_cat"] == "comm"]
    if comm:
        merged = []
        for s0, e0 in sorted((e["ts"], e["_end"]) for e in in_span if e["_cat"] != "comm"):
            if merged and s0 <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e0)
            else:
                merged.append([s0, e0])
        begins = [m[0] for m in merged]
        hidden = 0.0
        for e in comm:
            i = max(bisect.bisect_right(begins, e["ts"]) - 1, 0)
            while i < len(merged) and merged[i][0] < e["_end"]:
                hidden += max(0.0, min(e["_end"], merged[i][1]) - max(e["ts"], merged[i][0]))
                i += 1
        total = sum(e["dur"] for e in comm)
        print(f"\n== communication: {len(comm) / nsteps:.0f} NCCL kernels, {total / 1e3 / nsteps:.2f} ms per step, "
              f"{100 * hidden / max(total, 1e-9):.1f}% of it overlapped by compute kernels")


if __name__ == "__main__":
    sys.exit(main())
