#!/usr/bin/python3
"""Independent float64 reference of loom's InternLM model and loss, for tests/trainer/model_test.cpp.

Written from the architecture description (trainer/model/model.h), not from the C++: attention runs on
each document of a pack separately (no mask), rotary is written element-wise, the loss is
torch.nn.functional.cross_entropy itself.

  model_reference.py model DIR   reads DIR/config.json, DIR/<param>.npy (float32 weights by name),
                                 DIR/tokens|labels|positions|segments.npy; writes DIR/ref_logits.npy,
                                 DIR/ref_loss.npy [loss_sum, tokens, correct], DIR/ref_grad.<param>.npy
  model_reference.py loss DIR    reads DIR/logits.npy, DIR/labels.npy, DIR/config.json
                                 {"smoothing": [...]}; writes DIR/ref_loss_<i>.npy
                                 [loss_sum, tokens, correct] for each smoothing value
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

IGNORE = -100


def rms_norm(x, w, eps):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def rotary(x, pos, base):
    # x [n, heads, D], pos [n]: pairs (i, i + D/2) rotate by pos * base^(-2i/D).
    d = x.shape[-1]
    half = d // 2
    i = torch.arange(half, dtype=torch.float64)
    angle = pos.to(torch.float64)[:, None] * base ** (-2.0 * i / d)  # [n, D/2]
    c, s = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def causal_attention(q, k, v):
    # q [n, H, D], k/v [n, K, D]: one document, causal, kv head of query head h = h // (H/K).
    n, h, d = q.shape
    group = h // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    out = torch.empty_like(q)
    for head in range(h):
        scores = q[:, head, :] @ k[:, head, :].T / math.sqrt(d)
        scores = scores + torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), diagonal=1)
        out[:, head, :] = torch.softmax(scores, dim=-1) @ v[:, head, :]
    return out


def documents(seg_row):
    """(start, end) of each run of equal segment ids; each padding token (-1) alone."""
    runs, t, n = [], 0, len(seg_row)
    while t < n:
        end = t + 1
        if seg_row[t] >= 0:
            while end < n and seg_row[end] == seg_row[t]:
                end += 1
        runs.append((t, end))
        t = end
    return runs


def forward(cfg, p, tokens, positions, segments):
    c, h = cfg["hidden_size"], cfg["num_attention_heads"]
    kv = cfg["num_kv_attention_heads"] or h
    d = c // h
    eps = cfg["norm_eps"]
    b, t = tokens.shape
    x = p["tok_embeddings.weight"][tokens]  # [B, T, C]
    for li in range(cfg["num_layers"]):
        pre = "layers.%d." % li
        a = rms_norm(x, p[pre + "attention_norm.weight"], eps)
        qkv = a @ p[pre + "attention.wqkv.weight"].T
        if cfg["qkv_bias"]:
            qkv = qkv + p[pre + "attention.wqkv.bias"]
        q = qkv[..., : h * d].reshape(b, t, h, d)
        k = qkv[..., h * d : (h + kv) * d].reshape(b, t, kv, d)
        v = qkv[..., (h + kv) * d :].reshape(b, t, kv, d)
        rows = []
        for r in range(b):
            qr = rotary(q[r], positions[r], cfg["rope_base"])
            kr = rotary(k[r], positions[r], cfg["rope_base"])
            parts = [causal_attention(qr[s:e], kr[s:e], v[r, s:e]) for s, e in documents(segments[r].tolist())]
            rows.append(torch.cat(parts, dim=0))
        att = torch.stack(rows).reshape(b, t, h * d) @ p[pre + "attention.wo.weight"].T
        if cfg["out_bias"]:
            att = att + p[pre + "attention.wo.bias"]
        x = x + att
        m = rms_norm(x, p[pre + "ffn_norm.weight"], eps)
        gate = m @ p[pre + "feed_forward.w1.weight"].T
        up = m @ p[pre + "feed_forward.w2.weight"].T
        x = x + (gate * torch.sigmoid(gate) * up) @ p[pre + "feed_forward.w3.weight"].T
    x = rms_norm(x, p["norm.weight"], eps)
    head = p["tok_embeddings.weight"] if cfg["tie_embeddings"] else p["output.weight"]
    return x @ head.T


def loss_stats(logits, labels, smoothing):
    v = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, v), labels.reshape(-1), ignore_index=IGNORE,
                           label_smoothing=smoothing, reduction="sum")
    has = labels != IGNORE
    correct = ((logits.argmax(-1) == labels) & has).sum()
    return loss, torch.stack([loss.detach(), has.sum().to(torch.float64), correct.to(torch.float64)])


def main():
    mode, folder = sys.argv[1], sys.argv[2]
    load = lambda name: np.load(os.path.join(folder, name + ".npy"))
    save = lambda name, a: np.save(os.path.join(folder, name + ".npy"), np.ascontiguousarray(a, dtype=np.float64))
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    if mode == "loss":
        logits = torch.from_numpy(load("logits")).to(torch.float64)
        labels = torch.from_numpy(load("labels"))
        for i, eps in enumerate(cfg["smoothing"]):
            save("ref_loss_%d" % i, loss_stats(logits, labels, eps)[1].numpy())
        return
    assert mode == "model", mode
    params = {}
    for name in cfg["parameters"]:
        params[name] = torch.from_numpy(load(name)).to(torch.float64).requires_grad_(True)
    tokens = torch.from_numpy(load("tokens"))
    logits = forward(cfg, params, tokens, torch.from_numpy(load("positions")), torch.from_numpy(load("segments")))
    loss, stats = loss_stats(logits, torch.from_numpy(load("labels")), cfg["label_smoothing"])
    loss.backward()
    save("ref_logits", logits.detach().numpy())
    save("ref_loss", stats.numpy())
    for name, p in params.items():
        save("ref_grad." + name, p.grad.numpy())


if __name__ == "__main__":
    main()
