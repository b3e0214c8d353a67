#!/usr/bin/python3
"""Independent references for the loom-tokenize tests (Debian's python3-sentencepiece, numpy,
xxhash). Nothing here imports loom.

  reference.py internlm MODEL INPUT BIN [--text-key K] [--raw-records] [--no-bos] [--eos] [--txt-doc MODE]
      Writes BIN and BIN.meta the way InternLM's tools/tokenizer.py does: txt = each line of the file
      read in text mode, line.strip(), empty ones skipped; json = json.dumps(record) of each element
      of json.load(); jsonl = each raw line, newline included. InternLMTokenizer.encode adds BOS only
      (add_bos_token=True, add_eos_token=False). Each document is one line json.dumps({"tokens": ids})
      + "\\n"; BIN.meta is np.save of int32 (offset, count) rows computed by reading BIN back.
      --text-key (json/jsonl) encodes record[key] (dotted path) instead, as loom does.
  reference.py check-loom MODEL INPUT BIN [same options, --eos/--no-eos default on]
      Reads the loom shard BIN with the numpy reader of docs/FORMAT.md and compares every document
      with the reference ids, the header fields and both checksums. Prints "OK <docs> <tokens>".
"""
import argparse
import gzip
import json
import sys

import numpy as np
import sentencepiece as spm
import xxhash


def open_text(path):
    # Text mode with universal newlines, like tools/tokenizer.py's open(path, "r").
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, "r", encoding="utf-8")


def dotted(record, key):
    for part in key.split("."):
        record = record[part]
    return record


def documents(path, args):
    name = path[:-3] if path.endswith(".gz") else path
    ext = name.rsplit(".", 1)[-1]
    with open_text(path) as f:
        if ext == "txt":
            if args.txt_doc == "line":
                for line in f:
                    s = line.strip()
                    if s:
                        yield s
            elif args.txt_doc == "file":
                s = f.read().strip()
                if s:
                    yield s
            else:  # paragraph: runs of non-blank lines joined with "\n", stripped
                para = []
                for line in f:
                    if line.strip():
                        para.append(line.rstrip("\n"))
                    elif para:
                        yield "\n".join(para).strip()
                        para = []
                if para:
                    yield "\n".join(para).strip()
        elif ext == "json":
            for record in json.load(f):
                if args.raw_records:
                    yield json.dumps(record)
                else:
                    text = dotted(record, args.text_key)
                    if text:
                        yield text
        else:
            for line in f:
                if args.raw_records:
                    yield line
                elif line.strip():
                    text = dotted(json.loads(line), args.text_key)
                    if text:
                        yield text


def split_on_whitespace(text, cap):
    """The --max-doc-bytes rule of docs/TOKENIZE.md: cut before the last whitespace character that
    keeps the piece within cap bytes, else at the last UTF-8 boundary within cap."""
    data = text.encode("utf-8")
    pieces = []
    while len(data) > cap:
        cut, i = 0, 0
        while i <= cap and i < len(data):
            n = 1
            while i + n < len(data) and (data[i + n] & 0xC0) == 0x80:
                n += 1
            if i > 0 and data[i:i + n].decode("utf-8").isspace():
                cut = i
            i += n
        if cut == 0:
            cut = cap
            while (data[cut] & 0xC0) == 0x80:
                cut -= 1
        pieces.append(data[:cut].decode("utf-8"))
        data = data[cut:]
    if data:
        pieces.append(data.decode("utf-8"))
    return pieces


def no_dummy_prefix(sp):
    """The same model with NormalizerSpec.add_dummy_prefix = false: a NormalizerSpec holding only that
    field (field 3 of ModelProto, field 3 of NormalizerSpec) appended merges into the model's own."""
    return spm.SentencePieceProcessor(model_proto=sp.serialized_model_proto() + b"\x1a\x02\x18\x00")


def encode_continuation(sp, plain, piece):
    """A piece after a cut, as it reads inside the whole document: no dummy-prefix U+2581, unless the
    piece starts with whitespace the model drops (then the prefix stands for that whitespace)."""
    c = piece[:1]
    if c and (c in " \t\n\v\f\r\x1c\x1d\x1e\x1f" or ord(c) >= 0x80) and plain.encode(c + "a") == plain.encode("a"):
        return sp.encode(piece)
    return plain.encode(piece)


def encode_all(sp, path, args):
    bos = [sp.bos_id()] if args.bos else []
    eos = [sp.eos_id()] if args.eos else []
    plain = no_dummy_prefix(sp)
    for text in documents(path, args):
        ids = []
        pieces = split_on_whitespace(text, args.max_doc_bytes) if args.max_doc_bytes else [text]
        for i, piece in enumerate(pieces):
            ids += sp.encode(piece) if i == 0 else encode_continuation(sp, plain, piece)
        yield bos + ids + eos


def write_internlm(sp, path, bin_path, args):
    with open(bin_path, "wb") as out:
        for tokens in encode_all(sp, path, args):
            out.write(str.encode(json.dumps(dict(tokens=tokens)) + "\n"))
    meta, cur = [], 0
    with open(bin_path, "rb") as f:
        for line in f:
            meta.append((cur, len(json.loads(line)["tokens"])))
            cur += len(line)
    with open(bin_path + ".meta", "wb") as f:
        np.save(f, np.array(meta, dtype=np.int32))


def check_loom(sp, model, path, bin_path, args):
    h = np.fromfile(bin_path + ".meta", dtype=np.uint8, count=128)
    assert bytes(h[:8]) == b"LOOMTOK\0", "bad magic"
    version, header_size, dtype_bytes, vocab_size = (int(x) for x in h[8:24].view("<u4"))
    bos_id, eos_id = (int(x) for x in h[24:32].view("<i4"))
    flags = int(h[32:36].view("<u4")[0])
    num_docs, num_tokens, bin_hash, off_hash, fingerprint = (int(x) for x in h[40:80].view("<u8"))
    assert version == 1 and header_size == 128, (version, header_size)
    assert vocab_size == sp.get_piece_size(), (vocab_size, sp.get_piece_size())
    assert dtype_bytes == (2 if vocab_size <= 65536 else 4), dtype_bytes
    assert (bos_id, eos_id) == (sp.bos_id(), sp.eos_id()), (bos_id, eos_id)
    assert flags == (1 if args.bos else 0) | (2 if args.eos else 0), flags
    assert fingerprint == xxhash.xxh64(open(model, "rb").read()).intdigest(), "model fingerprint"
    raw = open(bin_path, "rb").read()
    assert bin_hash == xxhash.xxh64(raw).intdigest(), "bin checksum"
    offsets = np.fromfile(bin_path + ".meta", dtype="<u8", offset=header_size)
    assert off_hash == xxhash.xxh64(offsets.tobytes()).intdigest(), "offsets checksum"
    tokens = np.frombuffer(raw, dtype={2: "<u2", 4: "<u4"}[dtype_bytes])
    assert len(offsets) == num_docs + 1 and len(tokens) == num_tokens, (len(offsets), num_docs, len(tokens))
    ref = list(encode_all(sp, path, args))
    assert len(ref) == num_docs, f"docs: loom {num_docs}, reference {len(ref)}"
    for i, want in enumerate(ref):
        got = tokens[offsets[i]:offsets[i + 1]].tolist()
        if got != want:
            print(f"document {i} differs:\n  loom {got[:40]}\n  ref  {want[:40]}")
            sys.exit(1)
    print(f"OK {num_docs} {num_tokens}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["internlm", "check-loom"])
    p.add_argument("model")
    p.add_argument("input")
    p.add_argument("bin")
    p.add_argument("--text-key", default="text")
    p.add_argument("--raw-records", action="store_true")
    p.add_argument("--txt-doc", default="line")
    p.add_argument("--max-doc-bytes", type=int, default=0)
    p.add_argument("--no-bos", dest="bos", action="store_false")
    p.add_argument("--eos", dest="eos", action="store_true", default=None)
    p.add_argument("--no-eos", dest="eos", action="store_false")
    args = p.parse_args()
    if args.eos is None:
        args.eos = args.mode == "check-loom"
    sp = spm.SentencePieceProcessor(model_file=args.model)
    if args.mode == "internlm":
        write_internlm(sp, args.input, args.bin, args)
    else:
        check_loom(sp, args.model, args.input, args.bin, args)


if __name__ == "__main__":
    main()
