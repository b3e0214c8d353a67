#!/usr/bin/python3
"""The Python peer of loom-train for bench/train_bench.sh: the same InternLM-architecture model
(fused biased QKV, rotate-half rotary, block-diagonal causal mask by document, SwiGLU, RMSNorm,
untied head, no dropout), the same packed shards in the same shape (B packs of T tokens, M
micro-batches), loss sum / label tokens of the step, clipping at 1.0 and AdamW with loom's groups
(matrices decay, embeddings, norms and biases do not), in Debian's python3-torch (eager, float32,
CPU; the same libtorch_cpu and OpenBLAS as loom-train here), the same intra-op threads. Batches are
built before the timed steps, as loom-train's loader thread builds them ahead. Prints tokens/s over
the steps after the first two, real (non-padding) tokens, as loom-train's tokens_per_s.

  train_bench.py PACKED.bin STEPS B M C LAYERS HEADS VOCAB THREADS
"""
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

path, steps, B, M, C, L, H, V, threads = sys.argv[1], *map(int, sys.argv[2:])
torch.set_num_threads(threads)
torch.manual_seed(0)

meta = open(path + ".meta", "rb").read()
dtype_bytes, T, num_packs, num_segments = struct.unpack_from("<I", meta, 16)[0], struct.unpack_from("<I", meta, 36)[0], \
    struct.unpack_from("<Q", meta, 48)[0], struct.unpack_from("<Q", meta, 56)[0]
offs = np.frombuffer(meta, dtype="<u8", count=num_packs + 1, offset=128)
segs = np.frombuffer(meta, dtype=np.dtype([("doc", "<u8"), ("start", "<u4"), ("length", "<u4"), ("doc_pos", "<u4"),
                                           ("flags", "<u4")]), count=num_segments, offset=128 + 8 * (num_packs + 1))
toks = np.fromfile(path, dtype="<u2" if dtype_bytes == 2 else "<u4").reshape(num_packs, T).astype(np.int64)


def batch(first):
    idx = [(first + i) % num_packs for i in range(B)]
    tokens = torch.from_numpy(toks[idx])
    seg = torch.full((B, T), -1, dtype=torch.long)
    pos = torch.zeros((B, T), dtype=torch.long)
    labels = torch.full((B, T), -100, dtype=torch.long)
    for r, p in enumerate(idx):
        for j, s in enumerate(segs[offs[p]:offs[p + 1]]):
            a, n = int(s["start"]), int(s["length"])
            seg[r, a:a + n] = j
            pos[r, a:a + n] = torch.arange(n)
            labels[r, a:a + n - 1] = tokens[r, a + 1:a + n]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0) & causal
    mask |= torch.eye(T, dtype=torch.bool)  # padding rows attend to themselves (no empty softmax row)
    return tokens, pos, labels, mask[:, None], int((seg >= 0).sum())


D = C // H
F_ = 256 * math.ceil(C * 8 / 3 / 256)


class RMSNorm(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.weight = torch.nn.Parameter(torch.ones(C))
    def forward(s, x):
        return s.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


def rope(x, cos, sin):
    a, b = x[..., :D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-b, a], -1) * sin


class Layer(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.attention_norm, s.ffn_norm = RMSNorm(), RMSNorm()
        s.wqkv = torch.nn.Linear(C, 3 * C, bias=True); s.wo = torch.nn.Linear(C, C, bias=True)
        s.w1 = torch.nn.Linear(C, F_, bias=False); s.w2 = torch.nn.Linear(C, F_, bias=False)
        s.w3 = torch.nn.Linear(F_, C, bias=False)
    def forward(s, x, cos, sin, mask):
        b, t, _ = x.shape
        q, k, v = s.wqkv(s.attention_norm(x)).view(b, t, 3, H, D).unbind(2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), -1)
        x = x + s.wo((att @ v).transpose(1, 2).reshape(b, t, C))
        h = s.ffn_norm(x)
        return x + s.w3(F.silu(s.w1(h)) * s.w2(h))


class Model(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.tok_embeddings = torch.nn.Embedding(V, C)
        s.layers = torch.nn.ModuleList(Layer() for _ in range(L))
        s.norm = RMSNorm(); s.output = torch.nn.Linear(C, V, bias=False)
    def forward(s, tokens, pos, mask):
        inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
        ang = pos[..., None].float() * inv
        ang = torch.cat([ang, ang], -1)[:, :, None, :]
        cos, sin = ang.cos(), ang.sin()
        x = s.tok_embeddings(tokens)
        for layer in s.layers:
            x = layer(x, cos, sin, mask)
        return s.output(s.norm(x)).float()


model = Model()
decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 or "embed" in n]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
warm, tokens_done, t0 = 2, 0, None
batches = [[batch((step * M + m) * B) for m in range(M)] for step in range(steps)]
for step in range(steps):
    if step == warm:
        t0 = time.perf_counter()
    micro = batches[step]
    n = sum(int((lab != -100).sum()) for _, _, lab, _, _ in micro)
    for tokens, pos, labels, mask, _ in micro:
        logits = model(tokens, pos, mask)
        (F.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100, reduction="sum") / n).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if torch.isfinite(norm):
        opt.step()
    opt.zero_grad(set_to_none=False)
    if step >= warm:
        tokens_done += sum(real for *_, real in micro)  # real tokens, as loom-train's tokens_per_s
dt = time.perf_counter() - t0
print("python_tokens_per_s %.1f parameters %d" % (tokens_done / dt, sum(p.numel() for p in model.parameters())))
