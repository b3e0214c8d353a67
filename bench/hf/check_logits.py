#!/usr/bin/env python3
"""Loads an export-hf folder with transformers and checks it computes what loom computes.

loom's side is a `loom-train generate --dump-logits FILE` safetensors file (prompt_ids I64 [P],
prompt_logits F32 [P, V] from loom's forward, generated_ids I64 [N] greedy). Here transformers
loads the folder (AutoModelForCausalLM, the architecture config.json names), runs the same prompt
ids, and we report, per dtype:
  - max |logit difference| over every prompt position and the vocabulary, and the largest |logit|;
  - whether the argmax agrees at every prompt position;
  - greedy generation of N tokens with transformers' generate(): token for token equal to loom's.
Plus the tokenizer: AutoTokenizer of the folder (the class tokenizer_config.json names) against
sentencepiece on the folder's tokenizer.model with bos first, on the prompt and a few fixed texts
(spaces, NFKC, emoji, Japanese, a user-defined piece), both ids printed; with --corpus FILE, on
every line of FILE too. The prompt's ids are also compared with loom's (`loom-train generate
--prompt` encodes with loom's own SentencePiece encoder). Reported, not a failure unless
--tokenizer-only: the logit comparison feeds ids, not text.

Exit 0 when, in float32, the max difference is within --tol and greedy tokens are equal (bf16 is
reported with its own looser bound, --bf16-tol, relative to the largest |logit|).

usage: python3 bench/hf/check_logits.py --hf DIR --dump FILE [--device cuda] [--dtypes float32,bfloat16]
       python3 bench/hf/check_logits.py --hf DIR --tokenizer-only [--corpus FILE]...
"""
import argparse
import json
import sys

import numpy as np
import torch

# Texts where SentencePiece's normalizer and models are easy to get wrong.
FIXED_TEXTS = [
    "It was a fine day, and the",
    "Hello world",
    "  two  spaces  here ",
    "\uff26\uff55\uff4c\uff4c width \u2460\u2461 \u3000ideographic space",
    "emoji \U0001F600 and \U0001F9AC",
    "\u543e\u8f29\u306f\u732b\u3067\u3042\u308b\u3002",
    "tab\there, line\r",
    "x",
    "<eoh> a user-defined piece in InternLM's model",
]


def compare_tokenizer(folder, texts, golden=None):
    """(report, rows, all equal): AutoTokenizer's ids against sentencepiece's bos + EncodeAsIds, or
    against golden ids {text: ids} computed elsewhere (sentencepiece 0.2 refuses to load a model with
    a "\\0" piece, as InternLM's)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    if golden is None:
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=folder + "/tokenizer.model")
        bos = [sp.bos_id()] if sp.bos_id() >= 0 else []
        reference, version = (lambda t: bos + sp.encode(t)), spm.__version__
    else:
        reference, version = (lambda t: golden[t]), "golden ids"
    rows, equal = [], 0
    for t in texts:
        want = reference(t)
        got = list(tok(t)["input_ids"])
        equal += got == want
        rows.append((t, got, want))
    report = {
        "tokenizer_class": type(tok).__name__,
        "sentencepiece": version,
        "texts_equal": "%d of %d" % (equal, len(texts)),
    }
    return report, rows, equal == len(texts)


def print_rows(rows, limit):
    shown = 0
    for t, got, want in rows:
        if shown >= limit:
            break
        if limit < len(rows) and got == want:
            continue  # a corpus: only the differences
        shown += 1
        print("%s %r\n  transformers  %s\n  sentencepiece %s" % ("==" if got == want else "!=", t, got, want),
              file=sys.stderr)


def read_safetensors(path):  # the reader of docs/HF.md
    dtypes = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4"}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = np.frombuffer(f.read(), dtype=np.uint8)
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        out[name] = data[b:end].view(dtypes[e["dtype"]]).reshape(e["shape"])
    return out, meta


def load_model(folder, dtype, device):
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=dtype)
    return model.to(device).eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True, help="export-hf output folder")
    ap.add_argument("--dump", help="loom-train generate --dump-logits file")
    ap.add_argument("--tokenizer-only", action="store_true", help="only compare the tokenizer with sentencepiece")
    ap.add_argument("--corpus", action="append", default=[], help="also compare on every line of this text file")
    ap.add_argument("--golden", help="--tokenizer-only: JSON {text: ids (bos included)} to compare with instead of "
                    "sentencepiece; its texts are the ones compared")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--tol", type=float, default=1e-3, help="float32: max |logit diff| allowed")
    ap.add_argument("--bf16-tol", type=float, default=0.05, help="bfloat16: max |diff| / max |logit| allowed")
    args = ap.parse_args()
    if not args.tokenizer_only and not args.dump:
        ap.error("--dump is required unless --tokenizer-only")

    import transformers

    if args.tokenizer_only:
        report = {"transformers": transformers.__version__}
        ok = True
        if args.golden:
            golden = json.load(open(args.golden, encoding="utf-8"))
            rep, rows, eq = compare_tokenizer(args.hf, list(golden), golden)
            print_rows(rows, 3)
            report[args.golden] = rep
            ok &= eq
        else:
            rep, rows, eq = compare_tokenizer(args.hf, FIXED_TEXTS)
            print_rows(rows, len(rows))
            report["fixed_texts"] = rep
            ok &= eq
        for path in args.corpus:
            lines = open(path, "rb").read().decode("utf-8").split("\n")
            rep, rows, eq = compare_tokenizer(args.hf, lines)
            print_rows(rows, 3)
            report[path] = rep
            ok &= eq
        report["pass"] = bool(ok)
        print(json.dumps(report, indent=2))
        return 0 if ok else 1

    # Plain fp32 matmuls on the GPU, so the float32 figure measures the mapping, not TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    dump, meta = read_safetensors(args.dump)
    ids = dump["prompt_ids"].astype(np.int64)
    loom_logits = torch.from_numpy(dump["prompt_logits"].astype(np.float32))
    loom_generated = dump["generated_ids"].astype(np.int64).tolist()
    config = json.load(open(args.hf + "/config.json"))
    report = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(0),
        "architecture": config["architectures"][0],
        "prompt_tokens": int(len(ids)),
        "generated_tokens": len(loom_generated),
        "vocab": int(loom_logits.shape[-1]),
    }
    ok = True

    try:
        prompt = meta.get("prompt", "")
        rep, rows, eq = compare_tokenizer(args.hf, [prompt] + FIXED_TEXTS)
        print_rows(rows, len(rows))
        report["tokenizer"] = rep
        report["tokenizer_ids_equal"] = eq
        # rows[0] is the prompt: transformers' ids against the ids loom fed its model.
        report["tokenizer_prompt_ids_equal_loom"] = rows[0][1] == ids.tolist()
        report["prompt_ids_loom"] = ids.tolist()
        report["prompt_ids_transformers"] = rows[0][1]
    except Exception as e:  # a tokenizer problem must not hide the logit comparison
        report["tokenizer_error"] = "%s: %s" % (type(e).__name__, e)

    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        model = load_model(args.hf, dtype, args.device)
        report["model_class_" + name] = type(model).__name__
        x = torch.from_numpy(ids).view(1, -1).to(args.device)
        with torch.no_grad():
            logits = model(input_ids=x).logits[0].float().cpu()
        diff = (logits - loom_logits).abs().max().item()
        scale = loom_logits.abs().max().item()
        argmax_equal = bool(torch.equal(logits.argmax(-1), loom_logits.argmax(-1)))
        new = []
        if loom_generated:
            with torch.no_grad():
                out = model.generate(
                    input_ids=x,
                    attention_mask=torch.ones_like(x),
                    max_new_tokens=len(loom_generated),
                    do_sample=False,
                    eos_token_id=config.get("eos_token_id"),
                    pad_token_id=config.get("eos_token_id"),
                )
            new = out[0, x.shape[1]:].cpu().tolist()
        greedy_equal = new == loom_generated
        first_diff = next((i for i, (a, b) in enumerate(zip(new, loom_generated)) if a != b), None)
        report[name] = {
            "max_abs_logit_diff": diff,
            "max_abs_logit": scale,
            "relative": diff / max(scale, 1e-30),
            "argmax_equal_all_positions": argmax_equal,
            "greedy_tokens_equal": greedy_equal,
            "first_greedy_difference": first_diff,
            "hf_greedy": new,
        }
        if name == "float32":
            ok &= diff <= args.tol and greedy_equal and argmax_equal
        elif name == "bfloat16":
            ok &= diff / max(scale, 1e-30) <= args.bf16_tol
        del model

    report["loom_greedy"] = loom_generated
    report["pass"] = bool(ok)
    print(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
