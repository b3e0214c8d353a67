#!/usr/bin/python3
"""Derives the demo inputs from ../shared/corpora (run from the repository root:
/usr/bin/python3 data_samples/make_samples.py). Deterministic: rerunning gives the same bytes."""
import gzip
import json
import os

root = os.path.dirname(os.path.abspath(__file__))
corpora = os.path.join(root, "..", "..", "shared", "corpora")

with open(os.path.join(corpora, "botchan.txt"), "rb") as f:
    botchan = f.read().split(b"\r\n")
with open(os.path.join(corpora, "wagahaiwa_nekodearu.txt"), "rb") as f:
    neko = f.read().decode("utf-8").split("\r\n")

# txt: the first 400 lines of Botchan, as shipped (BOM and CRLF kept: the readers must cope).
with open(os.path.join(root, "botchan_head.txt"), "wb") as f:
    f.write(b"\r\n".join(botchan[:400]) + b"\r\n")

# json: lines 401-1200 of Botchan as an array of records, ten lines per record, with a nested
# "meta" object (what --raw-records encodes through json.dumps).
records = []
for i in range(400, 1200, 10):
    text = " ".join(line.decode("utf-8").strip() for line in botchan[i:i + 10])
    records.append({"id": len(records), "text": text, "meta": {"source": "botchan", "lines": [i + 1, i + 10]}})
with open(os.path.join(root, "botchan_tail.json"), "w", encoding="utf-8") as f:
    json.dump(records, f, ensure_ascii=False, indent=1)
    f.write("\n")

# jsonl.gz: the first 300 lines of I Am a Cat, one record per line, with an extra field.
with open(os.path.join(root, "neko_head.jsonl.gz"), "wb") as raw:
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        for i, line in enumerate(neko[:300]):
            if line.strip():
                rec = {"text": line, "source": "wagahaiwa_nekodearu", "line": i + 1}
                f.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))
