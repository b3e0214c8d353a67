"""An independent float64 forward of an HF LLaMA / Qwen2 folder, written from the HF modelling
definition (not from loom's code): RMSNorm, rotate-half rotary with rope_theta, GQA by repeating
each kv head over its group of query heads (HF's repeat_kv), causal softmax attention with scale
1/sqrt(head_dim), SwiGLU MLP down(silu(gate x) * up x), optional q/k/v/o biases by HF name.

usage: hf_llama_reference.py HF_DIR IDS OUT
  IDS  comma-separated token ids of one sequence
  OUT  raw little-endian float64 logits [T, V]
Uses Debian's python3-numpy and python3-torch only.
"""
import json
import math
import os
import sys

import numpy as np
import torch

DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = np.frombuffer(f.read(), dtype=np.uint8)
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        a = data[b:end].view(DTYPES[e["dtype"]]).reshape(e["shape"])
        if e["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(a.astype(np.float64))
    return out


def load(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(folder, f)))
    return w


def main():
    folder, ids, out = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], sys.argv[3]
    cfg = json.load(open(os.path.join(folder, "config.json")))
    w = load(folder)
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    K = cfg.get("num_key_value_heads", H)
    D = C // H
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    T = len(ids)

    def rms(x, weight):
        return weight * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))

    def linear(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]

    def rope(t):  # [T, n, D]
        return t * cos + torch.cat([-t[..., D // 2:], t[..., : D // 2]], -1) * sin

    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope(linear(h, p + "self_attn.q_proj").view(T, H, D))
        k = rope(linear(h, p + "self_attn.k_proj").view(T, K, D)).repeat_interleave(H // K, dim=1)
        v = linear(h, p + "self_attn.v_proj").view(T, K, D).repeat_interleave(H // K, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D)
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), -1)
        o = torch.einsum("hts,shd->thd", a, v).reshape(T, H * D)
        x = x + linear(o, p + "self_attn.o_proj")
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        m = torch.nn.functional.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj")
        x = x + linear(m, p + "mlp.down_proj")
    x = rms(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    logits = (x @ head.T).numpy().astype("<f8")
    logits.tofile(out)


if __name__ == "__main__":
    main()
