#!/usr/bin/env python3
"""The peer for loom-train on one GPU: HF transformers' LlamaForCausalLM with loom's preset shapes.

Trains the same model shape, micro-batch and sequence length as loom-train's preset on random
tokens (every row one full-length causal sequence), bf16 parameters and activations, AdamW
(torch's fused kernel), in one of three attention/compile modes:
  eager    attn_implementation="eager"  (explicit softmax(QK^T)V)
  sdpa     attn_implementation="sdpa"   (torch's scaled_dot_product_attention: flash on H100/H200)
  compile  sdpa + torch.compile(model)
Prints one JSON line: tokens/s, model TFLOP/s and MFU by docs/GPU.md's formula (the same one
loom-train reports), and the allocator's peak memory. Run on the GPU machine
(scripts/device/run.sh); needs torch >= 2 and transformers.

Example: python3 bench/gpu/hf_llama.py --preset 1b --mode sdpa --micro-bsz 2 --steps 10
"""
import argparse
import json
import math
import time

import torch

PRESETS = {
    # hidden, layers, heads, kv heads, mlp_ratio, vocab; InternLM: biased QKV and output projection.
    "1b": dict(hidden=2048, layers=24, heads=16, kv_heads=16, mlp_ratio=8 / 3, vocab=103168),
    "7b": dict(hidden=4096, layers=32, heads=32, kv_heads=32, mlp_ratio=8 / 3, vocab=103168),
}
PEAK_BF16_TFLOPS = 989.0  # H100/H200 SXM dense bf16


def ffn_hidden(hidden, mlp_ratio):
    return 256 * math.ceil(hidden * mlp_ratio / 256)


def flops_per_token(p, seq_len):
    """trainer/model/flops.h and docs/GPU.md: 6 * N_mm + 12 * L * C * T, N_mm = parameters that take part
    in a matmul (wqkv, wo, w1, w2, w3 of every layer, and the head; no embedding, norms, biases)."""
    C, L, V = p["hidden"], p["layers"], p["vocab"]
    H, K = p["heads"], p["kv_heads"]
    D = C // H
    F = ffn_hidden(C, p["mlp_ratio"])
    per_layer = C * (H + 2 * K) * D + H * D * C + 3 * C * F
    n = L * per_layer + V * C
    return 6 * n + 12 * L * C * seq_len, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=PRESETS, default="1b")
    ap.add_argument("--mode", choices=["eager", "sdpa", "compile"], default="sdpa")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--micro-bsz", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--checkpoint", action="store_true", help="activation checkpointing (gradient_checkpointing)")
    args = ap.parse_args()

    from transformers import LlamaConfig, LlamaForCausalLM

    p = PRESETS[args.preset]
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    cfg = LlamaConfig(
        vocab_size=p["vocab"], hidden_size=p["hidden"], intermediate_size=ffn_hidden(p["hidden"], p["mlp_ratio"]),
        num_hidden_layers=p["layers"], num_attention_heads=p["heads"], num_key_value_heads=p["kv_heads"],
        max_position_embeddings=args.seq_len, rms_norm_eps=1e-5, rope_theta=10000.0, attention_bias=True,
        tie_word_embeddings=False, use_cache=False)
    attn = "eager" if args.mode == "eager" else "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, attn_implementation=attn, dtype=torch.bfloat16)
    model.train()
    if args.checkpoint:
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if args.mode == "compile" else model

    fpt, n = flops_per_token(p, args.seq_len)
    B, T = args.micro_bsz, args.seq_len
    gen = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, p["vocab"], (B, T), device="cuda", generator=gen)

    def step():
        out = step_model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out.loss

    for _ in range(args.warmup):
        loss = step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / args.steps
    tok_s = B * T / dt
    tflops = tok_s * fpt / 1e12
    print(json.dumps(dict(
        system="hf-transformers", mode=args.mode, preset=args.preset, micro_bsz=B, seq_len=T,
        checkpoint=args.checkpoint, matmul_params=n, step_s=round(dt, 4),
        tokens_per_s=round(tok_s, 1), tflops=round(tflops, 1), mfu=round(tflops / PEAK_BF16_TFLOPS, 4),
        peak_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
        peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2), final_loss=round(loss.item(), 4),
        torch=torch.__version__, device=torch.cuda.get_device_name())), flush=True)


if __name__ == "__main__":
    main()
