#!/usr/bin/python3
"""Peers for bench/tokenize_bench.sh (Debian's python3-sentencepiece and numpy).

  tokenize_peer.py internlm MODEL INPUT.txt OUT.bin
      InternLM's tools/tokenizer.py for a txt input, one process: each line stripped, encoded with
      BOS (InternLMTokenizer's defaults), written as json.dumps({"tokens": ids}) lines, then the
      .meta (np.save of int32 (offset, count)) computed by reading the .bin back, as the script does.
  tokenize_peer.py docs INPUT.txt OUT.txt
      Writes the documents (non-empty stripped lines), one per line, for `spm_encode` (the raw
      single-thread SentencePiece peer), and prints their bytes.
"""
import json
import sys

import numpy as np


def docs(path):
    with open(path, "r", encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if s:
                yield s


def internlm(model, path, out_path):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model)
    bos = sp.bos_id()
    with open(out_path, "wb") as out:
        for s in docs(path):
            out.write(str.encode(json.dumps(dict(tokens=[bos] + sp.encode(s))) + "\n"))
    meta, cur = [], 0
    with open(out_path, "rb") as f:
        for line in f:
            meta.append((cur, len(json.loads(line)["tokens"])))
            cur += len(line)
    with open(out_path + ".meta", "wb") as f:
        np.save(f, np.array(meta, dtype=np.int32))


def write_docs(path, out_path):
    n = 0
    with open(out_path, "w", encoding="utf-8") as out:
        for s in docs(path):
            out.write(s + "\n")
            n += len(s.encode("utf-8"))
    print(n)


if __name__ == "__main__":
    if sys.argv[1] == "internlm":
        internlm(*sys.argv[2:5])
    else:
        write_docs(*sys.argv[2:4])
