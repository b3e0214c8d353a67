#!/usr/bin/env python3
"""An independent reference of Megatron-LM's preprocess_data.py output, for the tests: the three
SentencePiece tokenizer types as megatron/training/tokenizer/tokenizer.py defines them (Python
sentencepiece), and the indexed dataset as IndexedDatasetBuilder writes it (struct + numpy).

  megatron_reference.py write TYPE MODEL INPUT.jsonl KEY PREFIX [--append-eod]
      writes PREFIX.bin and PREFIX.idx
  megatron_reference.py read PREFIX
      prints {"dtype": code, "docs": [[ids of document 0], ...], "sequences": [lengths]} as JSON
"""
import json
import struct
import sys

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
CODES = {np.uint16: 8, np.int32: 4}


class Tokenizer:
    """What Encoder.encode needs: tokenize(text) -> ids, eod, vocab_size."""

    def __init__(self, kind, model):
        import sentencepiece

        self.sp = sentencepiece.SentencePieceProcessor(model_file=model)
        self.kind = kind
        pieces = {self.sp.id_to_piece(i): i for i in range(len(self.sp))}
        self.vocab_size = len(pieces)
        self.specials = {}
        if kind == "SentencePieceTokenizer":
            def piece_or(i, name):
                try:
                    return self.sp.id_to_piece(i)
                except IndexError:  # id -1: the model has none
                    return name

            for t in ["<CLS>", "<SEP>", "<EOD>", "<MASK>", piece_or(self.sp.pad_id(), "<PAD>"),
                      piece_or(self.sp.bos_id(), "<BOS>"), piece_or(self.sp.eos_id(), "<EOS>")]:
                if t not in pieces:
                    pieces[t] = len(pieces)
                self.specials[t] = pieces[t]
            self.vocab_size = len(pieces)
            self.eod = self.specials["<EOD>"]
        else:
            self.eod = self.sp.eos_id()

    def tokenize(self, text):
        if self.kind == "GPTSentencePieceTokenizer":
            return self.sp.encode_as_ids(text)
        if self.kind == "Llama2Tokenizer":
            return [self.sp.bos_id()] + self.sp.encode(text)
        ids, idx = [], 0
        while True:
            found = {t: text.index(t, idx) for t in self.specials if t in text[idx:]}
            if not found:
                break
            t = min(found, key=found.get)
            ids += self.sp.encode_as_ids(text[idx:found[t]])
            ids.append(self.specials[t])
            idx = found[t] + len(t)
        return ids + self.sp.encode_as_ids(text[idx:])


def write(kind, model, path, key, prefix, append_eod):
    tok = Tokenizer(kind, model)
    dtype = np.uint16 if tok.vocab_size < 65500 else np.int32
    lengths, doc_index = [], [0]
    with open(prefix + ".bin", "wb") as out, open(path, encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)[key]
            ids = tok.tokenize(text)
            if ids and append_eod:
                ids.append(tok.eod)
            if ids:
                lengths.append(len(ids))
            out.write(np.array(ids, dtype=dtype).tobytes())
            doc_index.append(len(lengths))
    itemsize = np.dtype(dtype).itemsize
    pointers = np.concatenate([[0], np.cumsum(np.array(lengths, dtype=np.int64))[:-1]]) * itemsize if lengths else []
    with open(prefix + ".idx", "wb") as idx:
        idx.write(MAGIC + struct.pack("<Q", 1) + struct.pack("<B", CODES[dtype]))
        idx.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_index)))
        idx.write(np.array(lengths, dtype=np.int32).tobytes())
        idx.write(np.array(pointers, dtype=np.int64).tobytes())
        idx.write(np.array(doc_index, dtype=np.int64).tobytes())


def read(prefix):
    buf = open(prefix + ".idx", "rb").read()
    assert buf[:9] == MAGIC and struct.unpack("<Q", buf[9:17])[0] == 1
    code = buf[17]
    dtype = {8: np.uint16, 4: np.int32}[code]
    s, d = struct.unpack("<QQ", buf[18:34])
    lengths = np.frombuffer(buf, np.int32, s, 34)
    pointers = np.frombuffer(buf, np.int64, s, 34 + 4 * s)
    doc_index = np.frombuffer(buf, np.int64, d, 34 + 12 * s)
    data = np.fromfile(prefix + ".bin", dtype=dtype)
    seqs = [data[p // np.dtype(dtype).itemsize:][:n].tolist() for p, n in zip(pointers, lengths)]
    docs = [sum(seqs[doc_index[i]:doc_index[i + 1]], []) for i in range(d - 1)]
    print(json.dumps({"dtype": code, "docs": docs, "sequences": lengths.tolist()}))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], "--append-eod" in sys.argv[7:])
    else:
        read(sys.argv[2])
