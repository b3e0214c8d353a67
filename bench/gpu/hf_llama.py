#!/usr/bin/env python3
"""The peer for loom-train on one GPU: HF transformers' LlamaForCausalLM with loom's preset shapes.

Trains the same model shape, micro-batch and sequence length as loom-train's preset on random
tokens (every row one full-length causal sequence), bf16 parameters and activations, AdamW
(torch's fused kernel), in one of four attention/compile modes:
  eager    attn_implementation="eager"  (explicit softmax(QK^T)V)
  sdpa     attn_implementation="sdpa"   (torch's scaled_dot_product_attention: flash on H100/H200)
  compile  sdpa + torch.compile(model)
  flex     torchtitan-style document masking: torch's flex_attention (compiled) with a BlockMask
           from create_block_mask, whose mask_mod is causal AND same document, + torch.compile(model);
           needs --data (the documents come from the packs)
--data A.bin[,B.bin...]: train on loom packed shards (docs/FORMAT.md) instead of random tokens, the
packs in shard order as loom-train reads them (step i takes packs [i*B, (i+1)*B): the warm-up steps
take the first ones, like loom-train's first steps), one JSON line per shard, one model (compiled
once) for all. No loss crosses a segment (document piece) boundary or lands on padding (labels
-100) in every mode; flex restarts position ids at every segment and keeps attention inside the
segments; eager/sdpa/compile attend over the whole pack with positions 0..T-1 (exact for
one-document packs; "doc_masking": false in the line). Tokens/s counts real (unpadded) tokens, wall clock over the timed steps, the
block mask's construction included (built per step, as torchtitan builds it per batch).
Prints one JSON line: tokens/s, model TFLOP/s and MFU by docs/GPU.md's formula (the same one
loom-train reports), and the allocator's peak memory. Run on the GPU machine
(scripts/device/run.sh); needs torch >= 2 (flex: >= 2.5) and transformers.

Example: python3 bench/gpu/hf_llama.py --preset 1b --mode sdpa --micro-bsz 2 --steps 10
         python3 bench/gpu/hf_llama.py --preset 1b --mode flex --micro-bsz 4 --data P.bin --tags paragraphs
"""
import argparse
import json
import math
import os
import sys
import time

import torch

PRESETS = {
    # hidden, layers, heads, kv heads, mlp_ratio, vocab; InternLM: biased QKV and output projection.
    "1b": dict(hidden=2048, layers=24, heads=16, kv_heads=16, mlp_ratio=8 / 3, vocab=103168),
    "7b": dict(hidden=4096, layers=32, heads=32, kv_heads=32, mlp_ratio=8 / 3, vocab=103168),
    # The 7b's layers, 12 of them: its per-layer work where the 7b does not fit (an 80 GB card).
    "7b12": dict(hidden=4096, layers=12, heads=32, kv_heads=32, mlp_ratio=8 / 3, vocab=103168),
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


def read_packed_shard(bin_path):
    """docs/FORMAT.md's numpy reader of a loom packed shard."""
    import numpy as np
    h = np.fromfile(bin_path + ".meta", dtype=np.uint8, count=128)
    assert bytes(h[:8]) == b"LOOMPACK", "not a loom packed shard"
    u32 = h[8:48].view("<u4")
    version, header_size, dtype_bytes, seq_len = int(u32[0]), int(u32[1]), int(u32[2]), int(u32[7])
    assert version <= 1, f"format version {version} is newer than this reader"
    num_packs, num_segments = (int(x) for x in h[48:64].view("<u8"))
    meta = np.fromfile(bin_path + ".meta", dtype=np.uint8, offset=header_size)
    seg_offsets = meta[: 8 * (num_packs + 1)].view("<u8")
    seg = np.dtype([("doc", "<u8"), ("start", "<u4"), ("length", "<u4"), ("doc_pos", "<u4"), ("seg_flags", "<u4")])
    segments = meta[8 * (num_packs + 1):].view(seg)
    packs = np.memmap(bin_path, dtype={2: "<u2", 4: "<u4"}[dtype_bytes], mode="r").reshape(num_packs, seq_len)
    return packs, [segments[seg_offsets[p]:seg_offsets[p + 1]] for p in range(num_packs)]


def packed_batches(path, B, T, n_steps):
    """Host tensors per step: ids, position ids, labels, document ids (-1 on padding) [B, T], real tokens,
    and the step's segments' causal pairs sum(len * (len + 1) / 2)."""
    import numpy as np
    packs, segs = read_packed_shard(path)
    assert packs.shape[1] == T, f"{path}: seq_len {packs.shape[1]}, not {T}"
    need = n_steps * B
    assert len(packs) >= need, f"{path}: {len(packs)} packs, the steps need {need}"
    out = []
    for s in range(n_steps):
        ids = np.array(packs[s * B:(s + 1) * B], dtype=np.int64)
        pos = np.zeros((B, T), dtype=np.int64)
        doc = np.full((B, T), -1, dtype=np.int32)
        labels = np.full((B, T), -100, dtype=np.int64)
        real, pairs = 0, 0
        for b in range(B):
            for j, g in enumerate(segs[s * B + b]):
                a, n = int(g["start"]), int(g["length"])
                pos[b, a:a + n] = np.arange(n)
                doc[b, a:a + n] = j
                labels[b, a + 1:a + n] = ids[b, a + 1:a + n]  # the segment's first token is no target
                real += n
                pairs += n * (n + 1) // 2
        pin = (lambda t: t.pin_memory()) if torch.cuda.is_available() else (lambda t: t)
        out.append(dict(ids=pin(torch.from_numpy(ids)), pos=pin(torch.from_numpy(pos)),
                        labels=pin(torch.from_numpy(labels)), doc=pin(torch.from_numpy(doc)), real=real, pairs=pairs, segments=sum(len(segs[s * B + b]) for b in range(B))))
    return out


FLEX_NAME = "loom_flex"


def register_flex():
    """An attention function for HF's AttentionInterface that runs torch's flex_attention with the BlockMask
    given to the model call as the keyword block_mask (HF passes a forward's extra keywords down to the
    attention function); its mask function returns no mask (the BlockMask is the mask)."""
    from torch.nn.attention.flex_attention import flex_attention
    from transformers import AttentionInterface

    flex = torch.compile(flex_attention, dynamic=False)

    def loom_flex_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        block_mask = kwargs.get("block_mask")
        if block_mask is None:
            raise RuntimeError("block_mask did not reach the attention function")
        out = flex(query, key, value, block_mask=block_mask, scale=scaling,
                   enable_gqa=query.shape[1] != key.shape[1])
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(FLEX_NAME, loom_flex_attention)
    try:
        from transformers.masking_utils import AttentionMaskInterface
        AttentionMaskInterface.register(FLEX_NAME, lambda *args, **kwargs: None)
    except Exception as e:  # older transformers: the sdpa mask is made and ignored
        print(f"hf_llama: no AttentionMaskInterface ({e})", file=sys.stderr)


def make_block_mask_fn(B, T):
    """torchtitan's document mask: causal AND same document, from [B, T] document ids (padding -1 is
    its own document: padded positions attend among themselves, never to a document)."""
    import inspect
    from torch.nn.attention.flex_attention import create_block_mask
    kw = {"_compile": True} if "_compile" in inspect.signature(create_block_mask).parameters else {}
    cbm = create_block_mask if kw else torch.compile(create_block_mask)

    def build(doc):
        def mask_mod(b, h, q_idx, kv_idx):
            return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)
        return cbm(mask_mod, B, None, T, T, device=doc.device, **kw)
    return build


def compile_count():
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=PRESETS, default="1b")
    ap.add_argument("--mode", choices=["eager", "sdpa", "compile", "flex"], default="sdpa")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--micro-bsz", type=int, default=1)
    ap.add_argument("--micro-num", type=int, default=1, help="micro-batches accumulated per optimizer step")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--checkpoint", action="store_true", help="activation checkpointing (gradient_checkpointing)")
    ap.add_argument("--data", help="loom packed shards, comma-separated: one JSON line each")
    ap.add_argument("--tags", help="names for the --data shards' lines, comma-separated")
    args = ap.parse_args()
    if args.mode == "flex" and not args.data:
        ap.error("--mode flex needs --data (the documents come from the packs)")

    from transformers import LlamaConfig, LlamaForCausalLM

    p = PRESETS[args.preset]
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    cfg = LlamaConfig(
        vocab_size=p["vocab"], hidden_size=p["hidden"], intermediate_size=ffn_hidden(p["hidden"], p["mlp_ratio"]),
        num_hidden_layers=p["layers"], num_attention_heads=p["heads"], num_key_value_heads=p["kv_heads"],
        max_position_embeddings=args.seq_len, rms_norm_eps=1e-5, rope_theta=10000.0, attention_bias=True,
        tie_word_embeddings=False, use_cache=False)
    attn = {"eager": "eager", "flex": FLEX_NAME}.get(args.mode, "sdpa")
    if args.mode == "flex":
        register_flex()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, attn_implementation=attn, dtype=torch.bfloat16)
    model.train()
    if args.checkpoint:
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if args.mode in ("compile", "flex") else model

    fpt, n = flops_per_token(p, args.seq_len)
    B, T = args.micro_bsz, args.seq_len
    block_mask = make_block_mask_fn(B, T) if args.mode == "flex" else None

    def forward_backward(batch, scale):
        kw = {}
        if batch is None:
            ids = labels = rand_ids
        else:
            ids = batch["ids"].to("cuda", non_blocking=True)
            labels = batch["labels"].to("cuda", non_blocking=True)
            if args.mode == "flex":
                kw["position_ids"] = batch["pos"].to("cuda", non_blocking=True)
                kw["block_mask"] = block_mask(batch["doc"].to("cuda", non_blocking=True))
        out = step_model(input_ids=ids, labels=labels, **kw)
        (out.loss * scale).backward()
        return out.loss

    def step(group):
        """One optimizer step over --micro-num micro-batches (gradients accumulated, each loss scaled by
        1/micro_num: the mean over the step, as Megatron and loom accumulate)."""
        for b in group:
            loss = forward_backward(b, 1.0 / len(group))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if args.data:
        paths = args.data.split(",")
        tags = args.tags.split(",") if args.tags else [os.path.basename(x) for x in paths]
        runs = list(zip(tags, paths))
    else:
        gen = torch.Generator(device="cuda").manual_seed(1)
        rand_ids = torch.randint(0, p["vocab"], (B, T), device="cuda", generator=gen)
        runs = [(None, None)]

    M = args.micro_num
    for tag, path in runs:
        if path:
            try:
                batches = packed_batches(path, B, T, (args.warmup + args.steps) * M)
            except Exception as e:
                print(json.dumps(dict(system="hf-transformers", mode=args.mode, preset=args.preset, data=tag,
                                      error=str(e))), flush=True)
                continue
        else:
            batches = [None] * ((args.warmup + args.steps) * M)
        groups = [batches[i:i + M] for i in range(0, len(batches), M)]
        t_start = time.perf_counter()
        for g in groups[:args.warmup]:
            loss = step(g)
        torch.cuda.synchronize()
        warmup_s = time.perf_counter() - t_start
        torch.cuda.reset_peak_memory_stats()
        graphs0 = compile_count()
        t0 = time.perf_counter()
        for g in groups[args.warmup:]:
            loss = step(g)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        graphs1 = compile_count()
        dt = wall / args.steps
        timed = batches[args.warmup * M:]
        real = sum(b["real"] for b in timed) if path else B * T * M * args.steps
        tok_s = real / wall
        tflops = tok_s * fpt / 1e12
        line = dict(
            system="hf-transformers", mode=args.mode, preset=args.preset, micro_bsz=B, micro_num=M, seq_len=T,
            checkpoint=args.checkpoint, matmul_params=n, step_s=round(dt, 4),
            tokens_per_s=round(tok_s, 1), tflops=round(tflops, 1), mfu=round(tflops / PEAK_BF16_TFLOPS, 4))
        if path:
            pairs = sum(b["pairs"] for b in timed)
            exec_fpt = 6 * n + 12 * p["layers"] * p["hidden"] * pairs / real
            line.update(data=tag, doc_masking=args.mode == "flex", steps_timed=args.steps, real_tokens=real,
                        docs_per_pack=round(sum(b["segments"] for b in timed) / (B * M * args.steps), 2),
                        mfu_executed_attention=round(tok_s * exec_fpt / 1e12 / PEAK_BF16_TFLOPS, 4))
        line.update(
            peak_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
            peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2), final_loss=round(loss.item(), 4),
            warmup_s=round(warmup_s, 1), graphs_compiled_in_timed_steps=None if graphs0 is None else graphs1 - graphs0,
            torch=torch.__version__, device=torch.cuda.get_device_name())
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
